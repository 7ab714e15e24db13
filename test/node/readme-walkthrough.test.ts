// The README's curl walkthrough, run as written (bash, curl, node) against the real worker, the
// local sandbox host and the real pi in a box, with a scripted model standing in for OpenAI.
// A client mistake must surface where it happens, never as a misleading 404 further down.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { ROOT, freePort, nodePath, startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { startModelServer, type ModelServer } from "../support/model-server";

const SANDBOX_KEY = "readme-sandbox-key";
let host: Awaited<ReturnType<typeof startSandboxHost>>;
let worker: Awaited<ReturnType<typeof startWorker>>;
let model: ModelServer;

/** The first ```sh block under a README heading. */
function readmeBlock(heading: string): string {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const at = readme.indexOf(`### ${heading}\n`);
  expect(at, `README section "${heading}"`).toBeGreaterThanOrEqual(0);
  const m = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  return m![1];
}

/**
 * A live tail never ends by itself. Where a user would press Ctrl-C, the test's curl stops at the
 * run's finished-signal, or once caught up on a thread where no run is going on.
 */
const CTRL_C = `curl() {
  case "$*" in
    *live=sse*) command curl --max-time 120 "$@" | { running=; while IFS= read -r line || [ -n "$line" ]; do
        printf '%s\\n' "$line"
        case "$line" in *'"status":"running"'*) running=1 ;; esac
        case "$line" in *'"status":"completed"'*|*'"status":"pi_failed"'*|*'"status":"pi_session_orphaned"'*) break ;; esac
        case "$line" in *'"upToDate":true'*) [ -n "$running" ] || break ;; esac
      done; } ;;
    *) command curl "$@" ;;
  esac
}`;

/** Runs README lines in one bash, as a user pastes them; THREADBOX_URL/TOKEN come from the caller. */
function shell(script: string, env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const lines = script.split("\n").filter((l) => !/^export THREADBOX_(URL|TOKEN)=/.test(l));
  return new Promise((resolve) => {
    const child = spawn("bash", ["-c", `${CTRL_C}\n${lines.join("\n")}`], { env: { ...process.env, PATH: nodePath(), ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => { stdout += d; });
    child.stderr.on("data", (d) => { stderr += d; });
    child.on("exit", (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

async function mint(role: string): Promise<string> {
  return worker.mintHouseToken("house-readme", `user-${role}`, role);
}

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: SANDBOX_KEY });
  model = await startModelServer([]);
  const port = await freePort();
  worker = await startWorker({
    port,
    vars: {
      DAYTONA_API_URL: host.apiUrl,
      DAYTONA_API_KEY: SANDBOX_KEY,
      DAYTONA_TARGET: "local",
      THREADBOX_STREAM_URL: `http://127.0.0.1:${port}/api/stream`,
      // The walkthrough's live tails end once the stream has been idle this long.
      LONG_POLL_TIMEOUT_MS: "1500",
    },
  });
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await model?.close();
  await host?.close();
});

describe("README walkthrough", () => {
  it("creates, posts, reads and tails a thread, delegates to pi in a box, then has a bot answer", async () => {
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "printf hi > hello.txt" } }] }, { text: "wrote hello.txt" }, { text: "coder here" });
    const delegate = readmeBlock("Delegate a task to pi in a box").replace("https://api.openai.com/v1", model.baseUrl);
    const token = await mint("owner");
    const r = await shell(`${readmeBlock("Try it with curl")}\n${delegate}\n${readmeBlock("Talk to a bot")}`, { THREADBOX_URL: worker.url, THREADBOX_TOKEN: token });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const threadId = /^thread (th_\w+)$/m.exec(r.stdout)?.[1];
    const childId = /^child thread (th_\w+)$/m.exec(r.stdout)?.[1];
    expect(threadId).toBeTruthy();
    expect(childId).toBeTruthy();
    expect(r.stdout).toMatch(/^environment env_\w+$/m);
    // NDJSON read, then the SSE tail: the posted entry both times.
    expect(r.stdout).toContain('"duplicate":false'); // the post
    expect(r.stdout).toMatch(/\{"offset":"[^"]+","id":"m1",[^\n]*"text":"hi there"/);
    expect(r.stdout).toMatch(/^event: data\ndata:\[\{"id":"m1"/m);
    // The child thread ran pi to the end: the task, the tool call, the answer, completed.
    const child = await waitForStatus(childId!, token);
    expect(child.status).toBe("completed");
    const entries = (await (await fetch(`${worker.url}/api/threads/${childId}/entries?offset=-1`, { headers: { authorization: `Bearer ${token}` } })).json()) as
      { entries: { payload: { type: string; text?: string } }[] };
    const texts = entries.entries.map((e) => `${e.payload.type}:${e.payload.text ?? ""}`);
    expect(texts[0]).toBe("chat:write hello.txt containing hi");
    expect(texts).toContain("pi.assistant:wrote hello.txt");
    // The bot section made a second thread (its line follows the new bot's JSON), where @coder
    // answers with the environment's model.
    const botThread = [...r.stdout.matchAll(/(?<!child )thread (th_\w+)$/gm)].map((m) => m[1]);
    expect(botThread).toHaveLength(2);
    expect(await waitForChat(botThread[1], "coder here", token)).toBe(true);
  }, 180_000);

  it("a wrong token stops the walkthrough at its 401; nothing goes on to ask for a thread named undefined", async () => {
    const r = await shell(readmeBlock("Try it with curl"), { THREADBOX_URL: worker.url, THREADBOX_TOKEN: "not-a-token" });
    const all = `${r.stdout}${r.stderr}`;
    expect(r.stderr).toContain('{"code":"unauthorized","message":"invalid token"}');
    expect(r.stderr).toContain("T: see the error above");
    expect(all.match(/"code":"unauthorized"/g)).toHaveLength(1); // only the create step talked to the server
    expect(all).not.toContain("not_found");
    expect(r.stdout).toBe("");
  }, 60_000);

  it("a token that may not configure environments stops the delegation at its 403, not at a 404", async () => {
    const token = await mint("bot"); // bots write threads but do not configure environments
    const r = await shell(`${readmeBlock("Try it with curl")}\n${readmeBlock("Delegate a task to pi in a box")}`,
      { THREADBOX_URL: worker.url, THREADBOX_TOKEN: token });
    expect(r.stdout).toMatch(/^thread th_\w+$/m);
    expect(r.stderr).toContain('{"code":"forbidden"');
    expect(r.stderr).toContain("E: see the error above");
    expect(`${r.stdout}${r.stderr}`).not.toContain("not_found");
    expect(r.stdout).not.toMatch(/^child thread /m);
  }, 60_000);

  it("the bot section run without the environment step stops at the missing $E, not at a 404 for a thread named undefined", async () => {
    const token = await mint("owner");
    const r = await shell(`${readmeBlock("Try it with curl")}\n${readmeBlock("Talk to a bot")}`, { THREADBOX_URL: worker.url, THREADBOX_TOKEN: token });
    const all = `${r.stdout}${r.stderr}`;
    expect(r.stderr).toContain("E: create the environment above first");
    expect(all).not.toContain("not_found");
    expect(r.stdout.match(/thread th_\w+$/gm)).toHaveLength(1); // the curl section's thread only
  }, 60_000);
});

/** Whether a chat with this text appears on the thread within 30 s. */
async function waitForChat(threadId: string, text: string, token: string): Promise<boolean> {
  for (let i = 0; i < 120; i++) {
    const r = (await (await fetch(`${worker.url}/api/threads/${threadId}/entries?offset=-1`, { headers: { authorization: `Bearer ${token}` } })).json()) as
      { entries: { payload: { type: string; text?: string } }[] };
    if (r.entries.some((e) => e.payload.type === "chat" && e.payload.text === text)) return true;
    await new Promise((res) => setTimeout(res, 250));
  }
  return false;
}

async function waitForStatus(threadId: string, token: string) {
  for (;;) {
    const t = (await (await fetch(`${worker.url}/api/threads/${threadId}`, { headers: { authorization: `Bearer ${token}` } })).json()) as { status: string };
    if (t.status === "completed" || t.status === "failed") return t;
    await new Promise((r) => setTimeout(r, 250));
  }
}
