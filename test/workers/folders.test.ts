import { describe, expect, it, vi } from "vitest";
import { env } from "cloudflare:test";
import { call, delegateLaunchable, errorCode, houseToken, readAll } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";
import { LABEL_RUN } from "../../src/sandbox/provider";
import { tarArchive } from "../support/tar";
import { storeFolderVersion } from "../../src/workspace/folder-store";
import { plainStreamStub } from "../../src/http/actors";
import { plainStreamRequest } from "../../src/streams/internal-request";


async function createEnv(token: string, body: Record<string, unknown> = {}) {
  const r = await call("/api/environments", { method: "POST", token, json: { name: "folders", provider: "test", model: "local/m", ...body } });
  return { status: r.status, body: (await r.json()) as any };
}

function upload(token: string, envId: string, name: string | null, body: BodyInit, headers: Record<string, string> = {}) {
  const q = name === null ? "" : `?name=${encodeURIComponent(name)}`;
  return call(`/api/environments/${envId}/folders${q}`, { method: "POST", token, body, headers: { "content-type": "application/x-tar", ...headers } });
}

async function sha256(bytes: Uint8Array): Promise<string> {
  return Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)), (b) => b.toString(16).padStart(2, "0")).join("");
}

describe("environment folders: upload, versions, download", () => {
  it("each upload is the folder's next version; the newest is the default download, any version by number", async () => {
    const token = await houseToken("house-folders-a");
    const e = (await createEnv(token)).body;
    const v1 = tarArchive({ "notes/todo.txt": "one\n" });
    const v2 = tarArchive({ "notes/todo.txt": "one\ntwo\n" });
    const r1 = await upload(token, e.id, "notes", v1);
    expect(r1.status).toBe(201);
    expect(await r1.json()).toMatchObject({ name: "notes", version: 1, format: "tar", bytes: v1.byteLength, sha256: await sha256(v1), createdBy: "alice" });
    expect((await upload(token, e.id, "notes", v2)).status).toBe(201);

    const list = (await (await call(`/api/environments/${e.id}/folders`, { token })).json()) as any;
    expect(list.folders).toHaveLength(1);
    expect(list.folders[0]).toMatchObject({ name: "notes", latest: 2 });
    expect(list.folders[0].versions.map((v: any) => v.version)).toEqual([1, 2]);

    const latest = await call(`/api/environments/${e.id}/folders/notes`, { token });
    expect(latest.status).toBe(200);
    expect(latest.headers.get("content-type")).toBe("application/x-tar");
    expect(latest.headers.get("folder-version")).toBe("2");
    expect(new Uint8Array(await latest.arrayBuffer())).toEqual(v2);
    expect(new Uint8Array(await (await call(`/api/environments/${e.id}/folders/notes?version=1`, { token })).arrayBuffer())).toEqual(v1);

    const missing = await call(`/api/environments/${e.id}/folders/notes?version=9`, { token });
    expect(missing.status).toBe(404);
    expect(await errorCode(missing)).toBe("not_found");
    expect((await call(`/api/environments/${e.id}/folders/nothing`, { token })).status).toBe(404);
    expect((await call(`/api/environments/${e.id}/folders/notes?version=abc`, { token })).status).toBe(400);
  });

  it("a downloaded archive, like every API answer, is kept by no cache and not sniffed", async () => {
    const token = await houseToken("house-folders-cache");
    const e = (await createEnv(token)).body;
    expect((await upload(token, e.id, "notes", tarArchive({ "a.txt": "private\n" }))).status).toBe(201);
    const got = await call(`/api/environments/${e.id}/folders/notes`, { token });
    const head = await call(`/api/environments/${e.id}/folders/notes`, { method: "HEAD", token });
    const deleted = await call(`/api/environments/${e.id}`, { method: "DELETE", token });
    expect(deleted.status).toBe(204);
    for (const [what, r] of Object.entries({ got, head, deleted })) {
      expect(r.status, what).toBeLessThan(300);
      expect(r.headers.get("cache-control"), what).toBe("no-store");
      expect(r.headers.get("x-content-type-options"), what).toBe("nosniff");
    }
  });

  it("an archive larger than one stored chunk comes back byte for byte; zip and tar.gz are recognized by their bytes", async () => {
    const token = await houseToken("house-folders-big");
    const e = (await createEnv(token)).body;
    const noise = crypto.getRandomValues(new Uint8Array(60_000));
    const big = tarArchive(Object.fromEntries(Array.from({ length: 25 }, (_, i) => [`blob-${i}.bin`, noise])));
    expect(big.byteLength).toBeGreaterThan(1_400_000);
    const r = await upload(token, e.id, "data", big, { "content-type": "application/octet-stream" });
    expect(r.status).toBe(201);
    const back = new Uint8Array(await (await call(`/api/environments/${e.id}/folders/data`, { token })).arrayBuffer());
    expect(back.byteLength).toBe(big.byteLength);
    expect(await sha256(back)).toBe(await sha256(big));

    const zip = new Uint8Array([0x50, 0x4b, 0x05, 0x06, ...new Array(18).fill(0)]);
    expect(await (await upload(token, e.id, "zipped", zip)).json()).toMatchObject({ format: "zip" });
    const gz = new Uint8Array(await new Response(new Blob([tarArchive({ "a.txt": "a" })]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
    const gzr = await upload(token, e.id, "gzipped", gz);
    expect(await gzr.json()).toMatchObject({ format: "tar.gz" });
    expect((await call(`/api/environments/${e.id}/folders/gzipped`, { token })).headers.get("content-type")).toBe("application/gzip");
  });

  it("a multipart/form-data upload (curl -F, a browser form) stores its one file; the name from the query or a name field", async () => {
    const token = await houseToken("house-folders-multipart");
    const e = (await createEnv(token)).body;
    const tar = tarArchive({ "notes/todo.txt": "one\n" });
    const form = (fields: Record<string, string>, files: Uint8Array[]) => {
      const f = new FormData();
      for (const [k, v] of Object.entries(fields)) f.append(k, v);
      files.forEach((bytes, i) => f.append(`file${i}`, new Blob([bytes]), `a${i}.tar`));
      return f;
    };
    const byQuery = await call(`/api/environments/${e.id}/folders?name=notes`, { method: "POST", token, body: form({}, [tar]) });
    expect(byQuery.status).toBe(201);
    expect(await byQuery.json()).toMatchObject({ name: "notes", version: 1, format: "tar", bytes: tar.byteLength, sha256: await sha256(tar) });
    const byField = await call(`/api/environments/${e.id}/folders`, { method: "POST", token, body: form({ name: "notes" }, [tar]) });
    expect(byField.status).toBe(201);
    expect(await byField.json()).toMatchObject({ name: "notes", version: 2 });
    expect(new Uint8Array(await (await call(`/api/environments/${e.id}/folders/notes`, { token })).arrayBuffer())).toEqual(tar);
    // Just over the limit, and far over it (past the room left for the multipart framing): the limit named is the archive's.
    for (const size of [2_000_001, 2_200_000]) {
      const tooBig = await call(`/api/environments/${e.id}/folders?name=big`, { method: "POST", token, body: form({}, [new Uint8Array(size)]) });
      expect([size, tooBig.status, await tooBig.json()]).toEqual([size, 413, { error: { code: "payload_too_large", message: "the archive is larger than 2000000 bytes" } }]);
    }
    for (const [what, body] of [["no name", form({}, [tar])], ["two files", form({ name: "x" }, [tar, tar])], ["no file", form({ name: "x" }, [])], ["not an archive", form({ name: "x" }, [new TextEncoder().encode("text")])]] as const) {
      const r = await call(`/api/environments/${e.id}/folders`, { method: "POST", token, body });
      expect(r.status, what).toBe(400);
      expect(await errorCode(r), what).toBe("validation_failed");
    }
  });

  it("a multipart upload of the archive among thousands of tiny fields is refused before the form is parsed", async () => {
    const token = await houseToken("house-folders-multipart-parts");
    const e = (await createEnv(token)).body;
    const tar = tarArchive({ "notes/todo.txt": "one\n" });
    const f = new FormData();
    f.append("name", "notes");
    f.append("file", new Blob([tar]), "a.tar");
    for (let i = 0; i < 20_000; i++) f.append("f", "x");
    const r = await call(`/api/environments/${e.id}/folders`, { method: "POST", token, body: f });
    expect([r.status, await r.json()]).toEqual([400, { error: { code: "validation_failed", message: "a multipart upload has at most 16 parts: the archive and its name" } }]);
    // Nor past the count: parts on lines ended by LF alone (the runtime's parser takes them), or a
    // content type whose boundary could be read two ways.
    const lf = (boundary: string, n: number) => {
      const text = (t: string) => new TextEncoder().encode(t);
      const fields = Array.from({ length: n }, (_, i) => `--${boundary}\nContent-Disposition: form-data; name="f${i}"\n\nx\n`).join("");
      const head = text(`${fields}--${boundary}\nContent-Disposition: form-data; name="file"; filename="a.tar"\nContent-Type: application/x-tar\n\n`);
      const tail = text(`\n--${boundary}--\n`);
      const out = new Uint8Array(head.length + tar.length + tail.length);
      out.set(head);
      out.set(tar, head.length);
      out.set(tail, head.length + tar.length);
      return out;
    };
    for (const [what, contentType, body] of [
      ["LF lines", "multipart/form-data; boundary=XyZ", lf("XyZ", 20_000)],
      ["a boundary inside a quoted parameter", 'multipart/form-data; x="; boundary=AAA"; boundary=XyZ', lf("XyZ", 100)],
      ["an escaped boundary", 'multipart/form-data; boundary="X\\yZ"', lf("XyZ", 100)],
      ["two boundaries", "multipart/form-data; boundary=XyZ; boundary=AAA", lf("XyZ", 100)],
    ] as const) {
      const r = await call(`/api/environments/${e.id}/folders?name=notes`, { method: "POST", token, body, headers: { "content-type": contentType } });
      expect([what, r.status, await errorCode(r)]).toEqual([what, 400, "validation_failed"]);
    }
    // A form with a few fields besides the archive is still taken.
    const few = new FormData();
    for (let i = 0; i < 14; i++) few.append(`extra${i}`, "x");
    few.append("name", "notes");
    few.append("file", new Blob([tar]), "a.tar");
    expect((await call(`/api/environments/${e.id}/folders`, { method: "POST", token, body: few })).status).toBe(201);
  });

  it("refuses bad uploads with clear 4xx answers, an oversize one while it is still arriving", async () => {
    const token = await houseToken("house-folders-bad");
    const e = (await createEnv(token)).body;
    const tar = tarArchive({ "a.txt": "a" });
    for (const [name, body] of [[null, tar], ["../up", tar], ["a b", tar], ["ok", new Uint8Array(0)], ["ok", new TextEncoder().encode("just some text, not an archive")]] as const) {
      const r = await upload(token, e.id, name, body);
      expect(r.status, `name=${name}`).toBe(400);
      expect(await errorCode(r)).toBe("validation_failed");
    }
    // What only looks like an archive by its first bytes is refused at upload, not in every run.
    const gzip = async (bytes: Uint8Array) => new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
    const twoMembers = tarArchive({ "a.bin": "x".repeat(200_000), "b.bin": "y".repeat(10) });
    const corruptTar = tar.slice();
    corruptTar[0] ^= 0xff; // the first header's checksum no longer holds
    for (const [what, body, message] of [
      ["gzip of text", await gzip(new TextEncoder().encode("notatar\n")), /inside the gzip data is cut short/],
      ["zip without its directory", new Uint8Array([0x50, 0x4b, 0x03, 0x04, ...new TextEncoder().encode("garbage")]), /central directory/],
      ["a corrupt tar header", corruptTar, /first header is corrupt/],
      ["a cut gzip", (await gzip(tar)).subarray(0, 12), /corrupt|cut short/],
      ["half a tar", twoMembers.subarray(0, Math.floor(twoMembers.length / 2)), /tar archive is cut short after 1 member/],
      ["half a tar.gz", (await gzip(twoMembers)).subarray(0, Math.floor((await gzip(twoMembers)).length / 2)), /cut short/],
    ] as const) {
      const r = await upload(token, e.id, "looks", body);
      expect(r.status, what).toBe(400);
      expect(((await r.json()) as { error: { message: string } }).error.message, what).toMatch(message);
    }
    // Chunked, no Content-Length: cut off at the cap, not buffered whole first.
    let sent = 0;
    const chunk = new Uint8Array(256 * 1024);
    const endless = new ReadableStream<Uint8Array>({
      pull(c) {
        sent += chunk.byteLength;
        if (sent > 64 * 1024 * 1024) c.close();
        else c.enqueue(chunk);
      },
    });
    const big = await upload(token, e.id, "big", endless);
    expect(big.status).toBe(413);
    expect(await errorCode(big)).toBe("payload_too_large");
    expect(sent).toBeLessThan(16 * 1024 * 1024);
    expect((await upload(token, e.id, "big", new Uint8Array(2_000_001), { "content-length": "2000001" })).status).toBe(413);
    expect((await call(`/api/environments/${e.id}/folders`, { token })).status).toBe(200);
    expect(((await (await call(`/api/environments/${e.id}/folders`, { token })).json()) as any).folders).toEqual([]);
    expect((await call(`/api/environments/${e.id}/folders?name=a&name=b`, { method: "POST", token, body: tar })).status).toBe(400);
  });

  it("only the environment's house reaches its folders; bots and readers do not upload", async () => {
    const owner = await houseToken("house-folders-own");
    const other = await houseToken("house-folders-other");
    const e = (await createEnv(owner)).body;
    expect((await upload(owner, e.id, "secret-notes", tarArchive({ "s.txt": "mine" }))).status).toBe(201);
    for (const r of [
      await upload(other, e.id, "secret-notes", tarArchive({ "s.txt": "theirs" })),
      await call(`/api/environments/${e.id}/folders`, { token: other }),
      await call(`/api/environments/${e.id}/folders/secret-notes`, { token: other }),
      await upload(owner, "env_nope", "x", tarArchive({ "s.txt": "x" })),
    ]) {
      expect(r.status).toBe(404);
      expect(await errorCode(r)).toBe("not_found");
    }
    expect((await upload(await houseToken("house-folders-own", "bot-1", "bot"), e.id, "x", tarArchive({ "a": "a" }))).status).toBe(403);
    expect((await upload(await houseToken("house-folders-own", "ro", "reader"), e.id, "x", tarArchive({ "a": "a" }))).status).toBe(403);
    expect((await call(`/api/environments/${e.id}/folders/secret-notes`, { token: "not-a-token" })).status).toBe(401);
    // Nothing the other house sent became a version.
    const list = (await (await call(`/api/environments/${e.id}/folders`, { token: owner })).json()) as any;
    expect(list.folders.map((f: any) => [f.name, f.latest])).toEqual([["secret-notes", 1]]);
  });

  it("deleting the environment deletes every version's archive, not only the index that lists them", async () => {
    const token = await houseToken("house-folders-delete");
    const e = (await createEnv(token)).body;
    for (const text of ["one\n", "two\n"]) expect((await upload(token, e.id, "notes", tarArchive({ "a.txt": text }))).status).toBe(201);
    expect((await upload(token, e.id, "other", tarArchive({ "b.txt": "b" }))).status).toBe(201);
    const list = (await (await call(`/api/environments/${e.id}/folders`, { token })).json()) as any;
    const streams: string[] = list.folders.flatMap((f: any) => f.versions.map((v: any) => v.stream));
    expect(streams).toHaveLength(3);
    for (const s of streams) expect((await call(`/api/stream/${s}`, { method: "HEAD", token })).status).toBe(200);

    expect((await call(`/api/environments/${e.id}`, { method: "DELETE", token })).status).toBe(204);
    for (const s of streams) expect((await call(`/api/stream/${s}`, { method: "HEAD", token })).status).toBe(404);
    expect((await call(`/api/environments/${e.id}/folders`, { token })).status).toBe(404);
  });

  it("an archive someone forked and deleted already (a tombstone, 410) does not stop the environment's deletion", async () => {
    const token = await houseToken("house-folders-tomb");
    const e = (await createEnv(token)).body;
    const v = (await (await upload(token, e.id, "notes", tarArchive({ "a.txt": "a" }))).json()) as { stream: string };
    const forked = await call(`/api/stream/tomb-fork`, { method: "PUT", token, headers: { "content-type": "application/x-tar", "stream-forked-from": `/api/stream/${v.stream}` } });
    expect(forked.status).toBe(201);
    // Only the control plane deletes an archive's stream (clients get 403: below).
    const deleted = await plainStreamStub(env as never, "house-folders-tomb", v.stream).fetch(plainStreamRequest("house-folders-tomb", v.stream, "DELETE"));
    expect(deleted.status).toBe(204);
    expect((await call(`/api/stream/${v.stream}`, { method: "HEAD", token })).status).toBe(410);

    expect((await call(`/api/environments/${e.id}`, { method: "DELETE", token })).status).toBe(204);
    expect((await call(`/api/environments/${e.id}`, { token })).status).toBe(404);
    // The fork still reads what it forked.
    expect(new Uint8Array(await (await call(`/api/stream/tomb-fork?offset=-1`, { token })).arrayBuffer()).byteLength).toBeGreaterThan(0);
  });

  it("a folder's archive is written through the folder route only: the stream path refuses every write to it, for every role", async () => {
    const token = await houseToken("house-folders-guard");
    const e = (await createEnv(token)).body;
    const good = tarArchive({ "a.txt": "good" });
    const v = (await (await upload(token, e.id, "notes", good)).json()) as { stream: string };
    for (const role of ["owner", "member", "bot", "admin"]) {
      const t = await houseToken("house-folders-guard", `${role}-user`, role);
      for (const [method, headers] of [["POST", {}], ["PUT", {}], ["DELETE", {}], ["PUT", { "stream-forked-from": `/api/stream/${v.stream}` }]] as const) {
        const r = await call(`/api/stream/${v.stream}`, { method, token: t, body: method === "DELETE" ? undefined : tarArchive({ "a.txt": "evil" }), headers: { "content-type": "application/x-tar", ...headers } });
        expect(r.status, `${role} ${method}`).toBe(403);
        expect(await errorCode(r)).toBe("forbidden");
      }
      // A new stream under folders/ cannot be made either.
      const fresh = await call(`/api/stream/folders/${e.id}/notes/planted`, { method: "PUT", token: t, body: tarArchive({ "a.txt": "evil" }), headers: { "content-type": "application/x-tar" } });
      expect(fresh.status).toBe(403);
      await fresh.body?.cancel();
    }
    // Reading it stays open to the house, and the download is what was uploaded.
    expect((await call(`/api/stream/${v.stream}`, { method: "HEAD", token })).status).toBe(200);
    const down = await call(`/api/environments/${e.id}/folders/notes`, { token });
    expect(new Uint8Array(await down.arrayBuffer())).toEqual(good);
  });

  it("an archive stored for an environment deleted meanwhile is not kept: its version is refused and its stream deleted", async () => {
    const token = await houseToken("house-folders-race");
    const e = (await createEnv(token)).body;
    expect((await call(`/api/environments/${e.id}`, { method: "DELETE", token })).status).toBe(204);
    const uuid = "00000000-0000-4000-8000-00000000f01d";
    const spy = vi.spyOn(crypto, "randomUUID").mockReturnValue(uuid);
    try {
      await expect(storeFolderVersion(env as never, "house-folders-race", e.id, "late", tarArchive({ "a.txt": "a" }), { createdBy: "alice" }))
        .rejects.toMatchObject({ code: "not_found" });
    } finally {
      spy.mockRestore();
    }
    expect((await call(`/api/stream/folders/${e.id}/late/${uuid}`, { method: "HEAD", token })).status).toBe(404);
  });

  it("environment folders are validated: names or stream sources, relative paths, readwrite only for uploads", async () => {
    const token = await houseToken("house-folders-schema");
    const ok = await createEnv(token, { folders: [{ source: "notes", path: "notes", access: "readwrite", exclude: ["node_modules"] }, { source: "stream:docs/archive", path: "docs" }] });
    expect(ok.status).toBe(201);
    expect(ok.body.folders).toEqual([
      { source: "notes", path: "notes", access: "readwrite", exclude: ["node_modules"] },
      { source: "stream:docs/archive", path: "docs", access: "read", exclude: [] },
    ]);
    for (const folders of [
      [{ source: "stream:docs", path: "docs", access: "readwrite" }],
      [{ source: "notes", path: "/etc" }],
      [{ source: "notes", path: "../x" }],
      [{ source: "no spaces", path: "x" }],
      [{ source: "a", path: "x" }, { source: "b", path: "x" }],
      [{ source: "a", path: "x", access: "readwrite" }, { source: "a", path: "y", access: "readwrite" }],
      [{ source: "a", path: "x", exclude: ["--checkpoint-action=exec=sh"] }],
      // One spelling per path: `.` is the working directory itself, `./x` is `x` again.
      [{ source: "a", path: "." }],
      [{ source: "a", path: "x" }, { source: "b", path: "./x" }],
    ]) {
      const r = await createEnv(token, { folders });
      expect(r.status, JSON.stringify(folders)).toBe(400);
    }
    for (const path of ["a/./b", ".", "./x"]) {
      const r = await createEnv(token, { files: [{ path, content: "x" }] });
      expect(r.status, path).toBe(400);
      expect(JSON.stringify(r.body.error.details)).toContain("files.0.path");
    }
  });
});

describe("folders inside folders", () => {
  // Copy-in replaces each folder's path in list order: a folder inside another is either wiped by
  // it (listed first) or packed into it at sync-back (listed after), making a version of the outer
  // folder that holds the inner one's files after a run that changed nothing.
  it("a folder inside another folder's path is refused with a 400 that names both, on create and on PATCH", async () => {
    const token = await houseToken("house-fold-nest");
    for (const folders of [
      [{ source: "proj", path: "data", access: "readwrite" }, { source: "ref", path: "data/ref" }],
      [{ source: "ref", path: "data/ref/deep" }, { source: "proj", path: "data" }],
    ]) {
      const r = await createEnv(token, { folders });
      expect(r.status, JSON.stringify(folders)).toBe(400);
      expect(JSON.stringify(r.body.error.details)).toMatch(/folder data\/ref(\/deep)? lies inside folder data/);
    }
    // Siblings whose names share a prefix are not nested.
    const ok = await createEnv(token, { folders: [{ source: "proj", path: "data" }, { source: "ref", path: "data-ref" }] });
    expect(ok.status).toBe(201);
    const patched = await call(`/api/environments/${ok.body.id}`, { method: "PATCH", token, json: { folders: [{ source: "proj", path: "data" }, { source: "ref", path: "data/ref" }] } });
    expect(patched.status).toBe(400);
  });
});

describe("folders and repositories", () => {
  // With two or more repositories the working directory holds them side by side, and a folder's
  // copy-in replaces its path after the clones: the checkout would be gone before the run starts.
  it("a folder at or around a repository's checkout is refused with a 400; one inside a checkout is fine", async () => {
    const token = await houseToken("house-fold-repo");
    const repositories = [{ url: "https://git.example/org/app.git" }, { url: "https://git.example/org/lib.git", path: "libs/lib" }];
    for (const path of ["app", "libs", "libs/lib"]) {
      const r = await createEnv(token, { repositories, folders: [{ source: "notes", path }] });
      expect(r.status, path).toBe(400);
      expect(JSON.stringify(r.body.error.details), path).toMatch(/folder .* would replace the checkout of repository/);
    }
    for (const path of ["app/notes", "libsx", "notes"]) {
      const r = await createEnv(token, { repositories, folders: [{ source: "notes", path }] });
      expect(r.status, path).toBe(201);
    }
    // One repository is the working directory itself: folder paths are inside it.
    expect((await createEnv(token, { repositories: [repositories[0]], folders: [{ source: "notes", path: "app" }] })).status).toBe(201);
  });
});

describe("environment folders in a launch", () => {
  async function delegate(token: string, environmentId: string) {
    const parent = (await (await call("/api/threads", { method: "POST", token, json: { environmentId } })).json()) as { id: string; houseId: string };
    return delegateLaunchable(token, parent, { task: "read the notes" });
  }

  it("the newest version of an uploaded folder and a stream's archive are unpacked into the working directory; the launch entry says which", async () => {
    const token = await houseToken("house-folders-launch");
    const e = (await createEnv(token, { folders: [{ source: "notes", path: "notes" }, { source: "stream:shared/docs.tar", path: "docs" }] })).body;
    await upload(token, e.id, "notes", tarArchive({ "todo.txt": "old" }));
    const v2 = tarArchive({ "todo.txt": "new" });
    await upload(token, e.id, "notes", v2);
    const docs = tarArchive({ "guide.md": "# guide" });
    expect((await call("/api/stream/shared/docs.tar", { method: "PUT", token, body: docs, headers: { "content-type": "application/x-tar" } })).status).toBe(201);

    const { childThreadId, runId } = await delegate(token, e.id);
    const launched = await vi.waitFor(async () => {
      const l = (await readAll(token, childThreadId)).entries.find((x) => x.payload.type === "signal.run.launched");
      expect(l).toBeTruthy();
      return l!;
    }, { timeout: 15_000, interval: 100 });
    expect(launched.payload.folders).toEqual([
      { source: "notes", path: "work/notes", access: "read", exclude: [], version: 2 },
      { source: "stream:shared/docs.tar", path: "work/docs", access: "read", exclude: [] },
    ]);
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const files = provider.boxes.get(box.ref)!.files;
    expect(files.get(`.threadbox/runs/${runId}/folders/0.tar`)).toEqual(v2);
    expect(files.get(`.threadbox/runs/${runId}/folders/1.tar`)).toEqual(docs);
    const commands = provider.calls.filter((c) => c.op === "exec" && c.ref === box.ref).map((c) => JSON.stringify(c.args));
    expect(commands.some((c) => c.includes("tar -xf '.threadbox/runs/") && c.includes("-C 'work/notes'"))).toBe(true);
  });

  it("a folder with no uploaded version fails the launch visibly, naming the folder", async () => {
    const token = await houseToken("house-folders-missing");
    const e = (await createEnv(token, { folders: [{ source: "never-uploaded", path: "n" }] })).body;
    const { childThreadId } = await delegate(token, e.id);
    const failed = await vi.waitFor(async () => {
      const t = (await (await call(`/api/threads/${childThreadId}`, { token })).json()) as any;
      expect(t.status).toBe("failed");
      return t;
    }, { timeout: 15_000, interval: 100 });
    expect(failed.reason).toBe("pi_failed");
    const signal = (await readAll(token, childThreadId)).entries.find((x) => x.payload.type === "signal.thread.status_changed" && x.payload.status === "pi_failed");
    expect(String(signal?.payload.reason)).toContain("folder never-uploaded has no uploaded version");
  });
});
