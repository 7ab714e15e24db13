// The web UI, driven the way a person uses it: a real headless Chromium (from the npm package
// @sparticuz/chromium, driven by playwright-core) against the worker under `wrangler dev`, which
// serves the built UI as static assets; the local sandbox host runs the real pi in a box, and
// a scripted OpenAI-compatible model stands in for the LLM provider.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, Page, WebSocketRoute } from "playwright-core";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { ROOT, freePort, startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { startModelServer, type ModelServer } from "../support/model-server";
import { jsonApi } from "../support/json-api";

const SANDBOX_KEY = "ui-sandbox-key";
const MODEL_SECRET = "sk-ui-secret-value";
const OUT_DIR = join(ROOT, "test-output", "web-ui");

let host: Awaited<ReturnType<typeof startSandboxHost>>;
let worker: Awaited<ReturnType<typeof startWorker>>;
let model: ModelServer;
let browser: Browser;
let token: string;

/** How many processes still carry this run's id in their environment (the box is a local directory). */
function processesOfRun(runId: string): number {
  let n = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, "utf8").includes(`THREADBOX_RUN_ID=${runId}\0`)) n++;
    } catch {
      // gone, or not ours
    }
  }
  return n;
}

async function waitFor(what: string, ready: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * A slow network the test controls: the nth request waits in `passed(n)` until the test calls
 * `open(n)` (either may come first), so what the test types while it waits is typed in flight.
 */
function gates() {
  const all = new Map<number, { passed: Promise<void>; open: () => void }>();
  const gate = (n: number) => {
    let g = all.get(n);
    if (!g) {
      let open!: () => void;
      const passed = new Promise<void>((r) => { open = r; });
      g = { passed, open };
      all.set(n, g);
    }
    return g;
  };
  return { passed: (n: number) => gate(n).passed, open: (...ns: number[]) => ns.forEach((n) => gate(n).open()) };
}

type Entry = { id: string; offset: string; ts: number; authorId?: string; payload: { type: string; [k: string]: any } };

const api = jsonApi(() => ({ url: worker.url, token }));

const entries = async (threadId: string): Promise<Entry[]> => (await api(`/api/threads/${threadId}/entries?offset=-1&limit=10000`)).body.entries;

async function launchBrowser(extraArgs: string[] = []): Promise<Browser> {
  // Without a Lambda-like environment the package does not unpack its bundled libraries.
  process.env.AWS_EXECUTION_ENV ??= "AWS_Lambda_nodejs22.x";
  const { default: sparticuz } = await import("@sparticuz/chromium");
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: await sparticuz.executablePath(),
    // The machine has no network beyond loopback: no background fetches that would only fail.
    // --single-process (meant for Lambda) takes the browser down with the first closed context.
    args: [...sparticuz.args.filter((a) => a !== "--single-process"), "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", ...extraArgs],
    headless: true,
  });
}

async function signedInPage(as = token): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1100, height: 860 } });
  await context.addInitScript((t) => localStorage.setItem("threadbox.token", t), as);
  return { context, page: await context.newPage() };
}

/** Chat bubbles in the page as [offset, text], in document order. */
const bubbles = (page: Page) =>
  page.$$eval("li.bubble", (els) => els.map((el) => [el.getAttribute("data-offset"), el.querySelector(".bubble-text")?.textContent ?? ""]));

beforeAll(async () => {
  mkdirSync(OUT_DIR, { recursive: true });
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
    },
  });
  token = await worker.mintHouseToken("house-ui", "ui-user", "owner");
  browser = await launchBrowser();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await worker?.stop();
  await model?.close();
  await host?.close();
});

describe("signing in", () => {
  it("serves the UI at / and on app routes, while /api stays the API", async () => {
    const home = await fetch(`${worker.url}/`);
    expect(home.headers.get("content-type")).toContain("text/html");
    const deep = await fetch(`${worker.url}/threads/t_anything`, { headers: { accept: "text/html" } });
    expect([deep.status, deep.headers.get("content-type")]).toEqual([200, "text/html; charset=utf-8"]);
    // An unknown /api path is the worker's JSON answer, never the page: 404 with a token, 401 without one.
    const missing = await fetch(`${worker.url}/api/no-such-route`, { headers: { authorization: `Bearer ${token}` } });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("not_found");
    const anonymous = await fetch(`${worker.url}/api/no-such-route`);
    expect([anonymous.status, anonymous.headers.get("content-type")]).toEqual([401, "application/json"]);
    expect((await fetch(`${worker.url}/health`)).status).toBe(200);
    // The bare API roots are the worker's too: a client with a wrong base URL gets JSON, not the page.
    for (const path of ["/api", "/v1", "/health/"]) {
      const r = await fetch(`${worker.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
      expect([path, r.headers.get("content-type")]).toEqual([path, expect.stringContaining("application/json")]);
      await r.body?.cancel();
    }
  });

  it("refuses a bad pasted token and accepts a house token", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(worker.url);
    await page.fill("textarea[name=token]", "not-a-token");
    await page.click("button[type=submit]");
    await page.waitForSelector("form.signin .error");
    expect(await page.textContent("form.signin .error")).toContain("not accepted");
    await page.fill("textarea[name=token]", token);
    await page.click("button[type=submit]");
    await page.waitForSelector("input[name=title]");
    expect(await page.evaluate(() => localStorage.getItem("threadbox.token"))).toBe(token);
    await context.close();
  });

  it("accepts the whole sign-in link pasted where the token goes", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(worker.url);
    await page.fill("textarea[name=token]", `${worker.url}/#token=${token}`);
    await page.click("button[type=submit]");
    await page.waitForSelector("input[name=title]");
    expect(await page.evaluate(() => localStorage.getItem("threadbox.token"))).toBe(token);
    await context.close();
  });

  it("signs in from a #token= link and removes the token from the address bar", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${worker.url}/#token=${token}`);
    await page.waitForSelector("input[name=title]");
    expect(page.url()).toBe(`${worker.url}/`);
    expect(await page.evaluate(() => localStorage.getItem("threadbox.token"))).toBe(token);
    await context.close();
  });

  it("a sign-in link opened in a tab already on the page signs in too (only the fragment changes)", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(worker.url);
    await page.waitForSelector("textarea[name=token]");
    await page.evaluate((t) => { location.hash = `token=${t}`; }, token);
    await page.waitForSelector("input[name=title]");
    expect(page.url()).toBe(`${worker.url}/`);
    expect(await page.evaluate(() => localStorage.getItem("threadbox.token"))).toBe(token);
    await context.close();
  });

  it("a sign-in link with another house's token, opened while signed in, asks first and keeps the current sign-in unless confirmed", async () => {
    const other = await worker.mintHouseToken("house-ui-other", "mallory", "owner");
    const context = await browser.newContext();
    // Seeded once: a reload must find what the page itself stored.
    await context.addInitScript((t) => { if (!sessionStorage.getItem("seeded")) { sessionStorage.setItem("seeded", "1"); localStorage.setItem("threadbox.token", t); } }, token);
    const page = await context.newPage();
    const stored = () => page.evaluate(() => localStorage.getItem("threadbox.token"));
    const asked = "This link signs you in to house house-ui-other as mallory (owner) instead of house house-ui as ui-user (owner).";

    // Opened as a new page: nothing switches until the user says so, and the link's token leaves the address bar.
    await page.goto(`${worker.url}/environments#token=${other}`);
    await page.waitForSelector("form.switch-house, .topbar .who"); // the question, or (unasked) the other house's pages
    expect(page.url()).toBe(`${worker.url}/environments`);
    expect(await stored() === token ? "kept" : "replaced").toBe("kept");
    expect((await page.textContent("form.switch-house"))?.replace(/\s+/g, " ")).toContain(asked);
    expect(await page.isVisible("input[name=name]")).toBe(false); // no page of either house to type into meanwhile
    await page.screenshot({ path: join(OUT_DIR, "switch-house.png") });
    await page.click("form.switch-house >> text=Stay in house house-ui");
    await page.waitForSelector("form.switch-house", { state: "detached" });
    expect(await page.textContent(".topbar .who")).toContain("house-ui as ui-user");
    expect(await page.isVisible("input[name=name]")).toBe(true);
    expect(await stored()).toBe(token);
    await page.reload();
    await page.waitForSelector("input[name=name]");
    expect(await page.$("form.switch-house")).toBeNull();
    expect(await stored()).toBe(token);

    // Opened in this tab (only the fragment changes): asked again; confirming switches.
    await page.evaluate((t) => { location.hash = `token=${t}`; }, other);
    await page.waitForSelector("form.switch-house");
    expect(page.url()).toBe(`${worker.url}/environments`);
    expect(await stored()).toBe(token);
    await page.click("form.switch-house >> text=Switch to house house-ui-other");
    await page.waitForSelector("form.switch-house", { state: "detached" });
    expect(await page.textContent(".topbar .who")).toContain("house-ui-other as mallory");
    expect(await stored()).toBe(other);

    // Another subject of the same house is asked about too; Escape stays.
    const eve = await worker.mintHouseToken("house-ui-other", "eve", "member");
    await page.goto(`${worker.url}/#token=${eve}`);
    await page.waitForSelector("form.switch-house");
    expect((await page.textContent("form.switch-house"))?.replace(/\s+/g, " ")).toContain("house house-ui-other as eve (member) instead of house house-ui-other as mallory (owner)");
    expect(await page.textContent("form.switch-house button[type=submit]")).toBe("Stay as mallory");
    await page.keyboard.press("Escape");
    await page.waitForSelector("form.switch-house", { state: "detached" });
    expect([await stored(), page.url()]).toEqual([other, `${worker.url}/`]);

    // The link of the token already in use signs in as before, without asking.
    await page.goto(`${worker.url}/#token=${other}`);
    await page.waitForSelector("input[name=title]");
    expect(await page.$("form.switch-house")).toBeNull();
    expect(page.url()).toBe(`${worker.url}/`);
    expect(await stored()).toBe(other);
    await context.close();
  });

  it("a stored token the server refuses (expired, revoked) leads back to sign-in", async () => {
    const context = await browser.newContext();
    await context.addInitScript(() => { if (!sessionStorage.getItem("seeded")) { sessionStorage.setItem("seeded", "1"); localStorage.setItem("threadbox.token", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.forged"); } });
    const page = await context.newPage();
    await page.goto(`${worker.url}/threads`);
    await page.waitForSelector("textarea[name=token]");
    expect(await page.evaluate(() => localStorage.getItem("threadbox.token"))).toBeNull();
    await page.waitForSelector("form.signin .error >> text=That token was not accepted"); // said, not a bare form
    await context.close();
  });

  /** A browser context signed in with an owner token that expires `seconds` from now (seeded once, not on reloads). */
  async function signedInForSeconds(seconds: number) {
    const { SignJWT } = await import("jose");
    const short = await new SignJWT({ kind: "house", house: "house-ui", role: "owner" }).setProtectedHeader({ alg: "HS256" })
      .setIssuer("threadbox").setSubject("ui-user").setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + seconds)
      .sign(new TextEncoder().encode("test-token-secret-0123456789abcdef"));
    const context = await browser.newContext();
    await context.addInitScript((t) => { if (!sessionStorage.getItem("seeded")) { sessionStorage.setItem("seeded", "1"); localStorage.setItem("threadbox.token", t); } }, short);
    return context;
  }

  it("a token that expires under a half-filled form: sign-in again, and the form is still filled", async () => {
    const context = await signedInForSeconds(3);
    const page = await context.newPage();
    await page.goto(`${worker.url}/environments`);
    const name = `typed-before-expiry-${Date.now().toString(36)}`;
    await page.fill("input[name=name]", name);
    await page.fill("textarea[name=env]", "A=1");
    await page.waitForFunction((exp) => Date.now() > exp, (Math.floor(Date.now() / 1000) + 4) * 1000, { timeout: 10_000 });
    await page.click("text=Create environment");
    await page.waitForSelector("form.signin .error >> text=That token was not accepted");
    expect(await page.evaluate(() => localStorage.getItem("threadbox.token"))).toBeNull();
    await page.fill("textarea[name=token]", token);
    await page.click("form.signin button[type=submit]");
    await page.waitForSelector("form.signin", { state: "detached" });
    expect([await page.inputValue("input[name=name]"), await page.inputValue("textarea[name=env]")]).toEqual([name, "A=1"]);
    await page.click("text=Create environment");
    await page.waitForSelector(`li[data-env-id] >> text=${name}`);
    await context.close();
    // Later tests expect this house's first environment to be theirs.
    const made = ((await api("/api/environments")).body.environments as { id: string; name: string }[]).find((e) => e.name === name)!;
    expect((await api(`/api/environments/${made.id}`, { method: "DELETE" })).status).toBe(204);
  });

  it("a thread left under the sign-in form asks the server nothing more; signed in again, it is live with its draft", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "outlived its token" } })).body;
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "before" } } });
    const context = await signedInForSeconds(3);
    const page = await context.newPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("li.bubble >> text=before");
    await page.fill("textarea[name=message]", "half a thought");
    await page.waitForSelector("form.signin", { timeout: 15_000 }); // the thread's next poll is refused
    const asked: string[] = [];
    page.on("request", (r) => { if (r.url().includes("/api/")) asked.push(r.url()); });
    page.on("websocket", (ws) => asked.push(ws.url()));
    await page.waitForTimeout(6_000); // past the thread's, its children's and the socket's next tries
    expect(asked).toEqual([]);
    await page.fill("textarea[name=token]", token);
    await page.click("form.signin button[type=submit]");
    await page.waitForSelector(".link-state[data-link=live]");
    expect(await page.inputValue("textarea[name=message]")).toBe("half a thought");
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "after" } } });
    await page.waitForSelector("li.bubble >> text=after");
    expect(await bubbles(page)).toEqual((await entries(thread.id)).map((e) => [e.offset, e.payload.text]));
    await context.close();
  });

  /** A tab in the background: its lists are not polled, so only the thread's socket can notice a refused token. */
  const inBackground = (context: BrowserContext) =>
    context.addInitScript(() => Object.defineProperty(document, "visibilityState", { get: () => "hidden" }));

  it("a thread's socket closed because its token expired (4001) leads back to sign-in, not to reconnecting for ever", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "socket outlived its token" } })).body;
    const context = await signedInForSeconds(3);
    await inBackground(context);
    const page = await context.newPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await page.fill("textarea[name=message]", "typed before it expired");
    await page.waitForFunction((exp) => Date.now() > exp, (Math.floor(Date.now() / 1000) + 4) * 1000, { timeout: 10_000 });
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    // The server checks the socket's token on the next entry it sends it, and closes it with 4001.
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "after expiry" } } });
    await page.waitForSelector("form.signin .error >> text=That token was not accepted", { timeout: 15_000 });
    await page.waitForTimeout(1_500);
    expect(sockets).toEqual([]); // the expired token is not tried again
    await page.fill("textarea[name=token]", token);
    await page.click("form.signin button[type=submit]");
    await page.waitForSelector(".link-state[data-link=live]");
    expect(await page.inputValue("textarea[name=message]")).toBe("typed before it expired");
    await page.waitForSelector("li.bubble >> text=after expiry");
    await context.close();
  });

  it("a reconnect the server refuses (401: the token expired while the network was down) leads back to sign-in", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "reconnect with an expired token" } })).body;
    const context = await signedInForSeconds(3);
    await inBackground(context);
    const page = await context.newPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await context.setOffline(true);
    await page.waitForSelector(".link-state[data-link=reconnecting]");
    await page.waitForFunction((exp) => Date.now() > exp, (Math.floor(Date.now() / 1000) + 4) * 1000, { timeout: 10_000 });
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    await context.setOffline(false);
    await page.waitForSelector("form.signin .error >> text=That token was not accepted", { timeout: 15_000 });
    await page.waitForTimeout(1_500);
    expect(sockets.length).toBe(1); // the one refused attempt, not a loop of them
    await context.close();
  });

  it("an unknown thread says so once: no socket, no polling, no console errors", async () => {
    const { context, page } = await signedInPage();
    const errors: string[] = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    const sockets: string[] = [];
    page.on("websocket", (ws) => sockets.push(ws.url()));
    const requests: string[] = [];
    page.on("request", (r) => { if (r.url().includes("/api/") && r.url().includes("th_doesnotexist")) requests.push(r.url()); });
    await page.goto(`${worker.url}/threads/th_doesnotexist000000000000/`);
    await page.waitForSelector("text=Thread th_doesnotexist000000000000 not found");
    await page.waitForTimeout(6_000); // past the thread's 5 s poll and two of the children's
    expect(sockets).toEqual([]);
    expect(requests.length).toBeLessThanOrEqual(2); // the thread and its children, asked once each
    expect(errors.filter((e) => !/Failed to load resource/.test(e))).toEqual([]);
    await context.close();
  });
});

describe("a delegated run, watched live", () => {
  it("environment from the UI, new thread, delegate; the tool call and the finished child appear live", async () => {
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/environments`);
    await page.fill("input[name=name]", "ui-e2e");
    await page.fill("input[name=model]", "local/scripted-model");
    await page.fill("textarea[name=env]", "PI_OFFLINE=1\nTHREADBOX_HEARTBEAT_MS=500");
    await page.fill("input[name=secret-name-0]", "SCRIPTED_MODEL_KEY");
    await page.fill("input[name=secret-value-0]", MODEL_SECRET);
    await page.fill("textarea[name=piModels]", JSON.stringify({
      providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", models: [{ id: "scripted-model" }] } },
    }));
    await page.fill("textarea[name=piSettings]", JSON.stringify({ retry: { enabled: false } }));
    await page.click("text=Create environment");
    await page.waitForSelector("li[data-env-id] >> text=ui-e2e");
    expect(await page.textContent("li[data-env-id]")).toContain("SCRIPTED_MODEL_KEY");
    expect(await page.content()).not.toContain(MODEL_SECRET); // write-only: the form is cleared and nothing echoes it
    await page.screenshot({ path: join(OUT_DIR, "environments.png"), fullPage: true });

    // The model holds its first answer until the page shows the running child.
    let release!: () => void;
    const gate = new Promise<void>((r) => { release = r; });
    model.push(
      { toolCalls: [{ name: "write", arguments: { path: "hello.txt", content: "hi\n" } }], until: gate },
      { toolCalls: [{ name: "bash", arguments: { command: "cat hello.txt" } }] },
      { text: "I wrote hello.txt containing hi." },
    );

    await page.click("a:has-text('Threads')");
    await page.fill("input[name=title]", "hello from the UI");
    await page.selectOption("form select[name=environment]", { label: "ui-e2e" });
    await page.click("text=New thread");
    await page.waitForURL(/\/threads\/[^/]+$/);
    const parentId = decodeURIComponent(page.url().split("/threads/")[1]);
    await page.waitForSelector(".link-state[data-link=live]");
    // The header says which environment the thread's bots and runs use.
    expect(await (await page.waitForSelector(".thread-head [data-environment]:has-text('ui-e2e')")).textContent()).toBe("ui-e2e");
    await page.evaluate(() => { (window as any).__sameDocument = true; });

    await page.fill("form.delegate input[name=task]", "write hello.txt containing hi");
    await page.click("form.delegate button[type=submit]");
    const card = await page.waitForSelector("li.child[data-child-id]");
    const childId = (await card.getAttribute("data-child-id"))!;
    expect((await api(`/api/threads/${childId}`)).body.parent).toEqual({ kind: "thread", id: parentId });
    await page.waitForSelector(`li.child[data-child-id="${childId}"] [data-status=running]`);

    await page.click(`li.child[data-child-id="${childId}"] a`);
    await page.waitForSelector(".thread-head [data-status=running]");
    await page.waitForSelector(".link-state[data-link=live]");
    expect(await page.textContent(".timeline")).toContain("write hello.txt containing hi");
    expect(await page.$("details.tool")).toBeNull(); // nothing yet: the model has not answered
    release();

    const write = await page.waitForSelector("details.tool[data-tool=write]");
    expect(await write.textContent()).toContain("hello.txt");
    await page.waitForSelector("details.tool[data-tool=write].tool-done");
    // A card shows that it opens, and whether it is open.
    const marker = () => page.$eval("details.tool[data-tool=write] summary", (el) => getComputedStyle(el, "::before").content);
    expect(await marker()).toBe('"\u25B8"');
    await page.click("details.tool[data-tool=write] summary");
    expect(await marker()).toBe('"\u25BE"');
    expect(await page.textContent("details.tool[data-tool=write] .diff .d-add")).toBe("+hi");
    await page.waitForSelector("details.tool[data-tool=bash].tool-done");
    await page.click("details.tool[data-tool=bash] summary");
    expect(await page.textContent("details.tool[data-tool=bash] pre.output")).toContain("hi");
    await page.waitForSelector("li.bubble-agent >> text=I wrote hello.txt containing hi.");
    await page.waitForSelector(".thread-head [data-status=completed]");
    await page.screenshot({ path: join(OUT_DIR, "child-thread.png"), fullPage: true });

    // Back on the parent: the child's card turns completed, and its result arrives as chat.
    await page.click(`.thread-head a[href="/threads/${parentId}"]`);
    await page.waitForSelector(`li.child[data-child-id="${childId}"] [data-status=completed]`);
    await page.waitForSelector("li[data-kind='signal.thread.child_finished']");
    await page.waitForSelector("li.bubble-agent >> text=I wrote hello.txt containing hi.");
    expect(await page.textContent("li.bubble-agent .bubble-head")).toContain("result of child thread");
    expect(await page.getAttribute("li.bubble-agent:has-text('I wrote hello.txt containing hi.')", "data-outcome")).toBe("completed");
    expect(await page.evaluate(() => (window as any).__sameDocument)).toBe(true); // no page load: all of it arrived live

    // What the page shows is the thread, once each: same offsets, same order.
    const shown = await page.$$eval("[data-offset]", (els) => els.map((el) => el.getAttribute("data-offset")));
    const offsets = (await entries(parentId)).map((e) => e.offset);
    expect(shown).toEqual(offsets);
    await page.screenshot({ path: join(OUT_DIR, "parent-thread.png"), fullPage: true });

    await page.goto(`${worker.url}/threads/${childId}`);
    await page.waitForSelector("details.tool[data-tool=write]");
    // What the run produced, kept on the thread: the file it wrote, with its content.
    const produced = await page.waitForSelector("details.artifacts li[data-path='hello.txt']");
    expect(await produced.textContent()).toContain("added");
    expect(await page.textContent("details.artifacts li[data-path='hello.txt'] pre.output")).toBe("hi\n");
    await page.click("details.tool[data-tool=write] summary");
    await page.screenshot({ path: join(OUT_DIR, "thread.png"), fullPage: false });
    if (process.env.UPDATE_UI_SCREENSHOT) copyFileSync(join(OUT_DIR, "thread.png"), join(ROOT, "docs", "ui.png"));

    await page.goto(`${worker.url}/`);
    await page.waitForSelector(`.tree-row[data-thread-id="${childId}"] [data-status=completed]`);
    const tree = await page.$$eval(".tree > li", (lis) => lis.map((li) => li.querySelectorAll("[data-thread-id]").length));
    expect(tree).toContain(2); // the parent row with its child nested under it
    await page.screenshot({ path: join(OUT_DIR, "threads.png") });

    await page.goto(`${worker.url}/sandboxes`);
    await page.click("input[type=checkbox]");
    await page.waitForSelector("tr[data-box-id]");
    // A live box offers a link to a port served inside it.
    const env = await api("/api/environments", { method: "POST", json: { name: "ui-preview", sharedBox: true } });
    const port = await freePort(); // the OS picks it: a random one could be in use (20000-40000 overlaps the ephemeral ports)
    const ran = await api(`/api/environments/${env.body.id}/exec`, {
      method: "POST", json: { command: `echo from-ui-preview > index.html; nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.5` },
    });
    const row = `tr[data-box-id="${ran.body.boxId}"]`;
    await page.waitForSelector(`${row} form.preview`, { timeout: 10_000 });
    // The newest box first, with the environment it belongs to.
    expect(await page.getAttribute("tbody tr:first-child", "data-box-id")).toBe(ran.body.boxId);
    // named as every other page names an environment (the list learns the new one on its next poll)
    await page.waitForSelector(`${row} >> text=environment ui-preview`, { timeout: 10_000 });
    await page.fill(`${row} form.preview input[name=port]`, String(port));
    await page.click(`${row} form.preview button`);
    const href = await (await page.waitForSelector(`${row} a.preview-link`)).getAttribute("href");
    let served = "";
    for (const t0 = Date.now(); served !== "from-ui-preview\n" && Date.now() - t0 < 15_000;) {
      served = await fetch(`${href}index.html`).then((x) => x.text()).catch(() => "");
      if (served !== "from-ui-preview\n") await new Promise((res) => setTimeout(res, 100));
    }
    expect(served).toBe("from-ui-preview\n");
    await page.screenshot({ path: join(OUT_DIR, "sandboxes.png") });
    await context.close();
  });
});

describe("mistakes in forms", () => {
  it("shows the API's error code and message, and catches bad JSON before sending", async () => {
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/environments`);
    await page.fill("input[name=name]", "broken");
    await page.fill("textarea[name=piModels]", "{not json");
    await page.click("text=Create environment");
    await page.waitForSelector("form.form .error >> text=pi models.json is not valid JSON");

    await page.fill("textarea[name=piModels]", "");
    await page.fill("input[name=secret-name-0]", "BAD-NAME");
    await page.fill("input[name=secret-value-0]", "s3cret");
    await page.click("text=Create environment");
    await page.waitForSelector("form.form .error >> text=validation_failed");
    expect(await page.inputValue("input[name=secret-value-0]")).toBe("s3cret"); // kept, to fix the name and retry
    // The field the server refused is named, not just "invalid request body".
    expect(await page.textContent("form.form .error")).toMatch(/secrets/);
    // A value without a name is not dropped without a word.
    await page.fill("input[name=secret-name-0]", "");
    await page.click("text=Create environment");
    await page.waitForSelector("form.form .error >> text=a secret has a value but no name");
    const names = ((await api("/api/environments")).body.environments as { name: string }[]).map((e) => e.name);
    expect(names).not.toContain("broken");
    await context.close();
  });

  it("the Bots form checks a handle in the browser, and a refused field is named", async (ctx) => {
    if ((await api("/api/agents")).status === 404) ctx.skip();
    const { context, page } = await signedInPage();
    const errors: string[] = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    await page.goto(`${worker.url}/bots`);
    await page.fill("input[name=name]", "Bad");
    await page.fill("input[name=handle]", "Bad Handle!");
    await page.fill("input[name=model]", "local/scripted-model");
    expect(await page.$eval("input[name=handle]", (el) => (el as HTMLInputElement).validity.patternMismatch)).toBe(true);
    await page.fill("input[name=handle]", "fine-handle");
    expect(await page.$eval("input[name=handle]", (el) => (el as HTMLInputElement).validity.valid)).toBe(true);
    await page.fill("input[name=model]", "nomodel");
    await page.click("text=Create bot");
    await page.waitForSelector("form.form .error >> text=model");
    expect(await page.textContent("form.form .error")).toMatch(/validation_failed: .*\(model: /);
    expect(errors.filter((e) => /pattern/i.test(e))).toEqual([]);
    await context.close();
  });
});

describe("the composer", () => {
  it("keeps what is typed while a message is on its way, and puts back a message the server refused", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "typing on" } })).body;
    const { context, page } = await signedInPage();
    // A slow network: each post is answered when the test lets it through; the third one is refused.
    const slow = gates();
    let posts = 0;
    await page.route(`**/api/threads/${thread.id}/entries`, async (route) => {
      if (route.request().method() !== "POST") return route.continue();
      const n = ++posts;
      await slow.passed(n);
      if (n === 3) return route.fulfill({ status: 503, contentType: "application/json", body: JSON.stringify({ error: { code: "unavailable", message: "try again" } }) });
      await route.continue();
    });
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await page.click("textarea[name=message]");
    await page.keyboard.type("first");
    await page.keyboard.press("Enter");
    await page.keyboard.type("second draft"); // while "first" is still being sent
    slow.open(1);
    await page.waitForSelector("li.bubble >> text=first");
    expect(await page.inputValue("textarea[name=message]")).toBe("second draft");
    slow.open(2);
    await page.keyboard.press("Enter");
    await page.waitForSelector("li.bubble >> text=second draft");
    await page.keyboard.type("third");
    await page.keyboard.press("Enter");
    await page.keyboard.type("fourth"); // while "third" is still being sent
    slow.open(3);
    await page.waitForSelector("form.composer .error >> text=unavailable");
    expect(await page.inputValue("textarea[name=message]")).toBe("third\nfourth");
    expect((await entries(thread.id)).map((e) => e.payload.text)).toEqual(["first", "second draft"]);
    await context.close();
  });

  it("a message that gets no answer (the server restarting, a dropped network) is sent again under its id: on the thread once, nothing put back", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "lost answers" } })).body;
    const { context, page } = await signedInPage();
    const ids: string[] = [];
    await page.route(`**/api/threads/${thread.id}/entries`, async (route) => {
      if (route.request().method() !== "POST") return route.continue();
      ids.push(JSON.parse(route.request().postData()!).id);
      if (ids.length === 1) {
        await route.fetch(); // the server takes it, and its answer never reaches the page
        return route.abort("connectionreset");
      }
      if (ids.length === 2) return route.abort("connectionrefused"); // the server is restarting
      await route.continue();
    });
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await page.click("textarea[name=message]");
    await page.keyboard.type("only once");
    await page.keyboard.press("Enter");
    await page.waitForSelector("li.bubble >> text=only once");
    await page.waitForFunction(() => !document.querySelector("form.composer .outbox li"), undefined, { timeout: 10_000 });
    expect({
      posts: ids.length,
      sameId: new Set(ids).size === 1,
      box: await page.inputValue("textarea[name=message]"),
      error: await page.$eval("form.composer", (f) => f.querySelector(".error")?.textContent ?? null),
      texts: (await entries(thread.id)).map((e) => e.payload.text),
    }).toEqual({ posts: 3, sameId: true, box: "", error: null, texts: ["only once"] });
    await context.close();
  });

  it("Enter while a message is on its way queues the next one: the box empties, the queue shows, and they arrive in order", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "queued" } })).body;
    const { context, page } = await signedInPage();
    // A slow network: each post is answered when the test lets it through; the third one is refused.
    const slow = gates();
    let posts = 0;
    await page.route(`**/api/threads/${thread.id}/entries`, async (route) => {
      if (route.request().method() !== "POST") return route.continue();
      const n = ++posts;
      await slow.passed(n);
      if (n === 3) return route.fulfill({ status: 503, contentType: "application/json", body: JSON.stringify({ error: { code: "unavailable", message: "try again" } }) });
      await route.continue();
    });
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await page.click("textarea[name=message]");
    const outbox = () => page.$$eval("form.composer .outbox li", (els) => els.map((el) => el.textContent));
    await page.keyboard.type("one");
    await page.keyboard.press("Enter");
    await page.keyboard.type("two");
    await page.keyboard.press("Enter"); // "one" is still on its way
    expect(await page.inputValue("textarea[name=message]")).toBe("");
    expect(await outbox()).toEqual(["Sending: one", "Queued: two"]);
    slow.open(1, 2);
    await page.waitForSelector("li.bubble >> text=two");
    expect((await bubbles(page)).map(([, t]) => t)).toEqual(["one", "two"]);
    expect(await outbox()).toEqual([]);
    // A refused message goes back into the box with what was queued behind it, which is not sent.
    await page.keyboard.type("three");
    await page.keyboard.press("Enter");
    await page.keyboard.type("four");
    await page.keyboard.press("Enter");
    expect(await outbox()).toEqual(["Sending: three", "Queued: four"]);
    await page.keyboard.type("five");
    slow.open(3);
    await page.waitForSelector("form.composer .error >> text=unavailable");
    expect(await page.inputValue("textarea[name=message]")).toBe("three\nfour\nfive");
    expect(await outbox()).toEqual([]);
    await page.waitForTimeout(2000);
    expect([posts, (await entries(thread.id)).map((e) => e.payload.text)]).toEqual([3, ["one", "two"]]);
    await context.close();
  });

  it("the Enter that commits an input method's word (Japanese, Chinese, Korean) does not send the message", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "入力" } })).body;
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await page.click("textarea[name=message]");
    // What an IME does: a composition, then Enter to commit it (a keydown the browser marks as composing).
    const cdp = await context.newCDPSession(page);
    await cdp.send("Input.imeSetComposition", { text: "にほん", selectionStart: 3, selectionEnd: 3 });
    await cdp.send("Input.dispatchKeyEvent", { type: "rawKeyDown", key: "Enter", code: "Enter", windowsVirtualKeyCode: 229, nativeVirtualKeyCode: 229 });
    await cdp.send("Input.insertText", { text: "日本" });
    await cdp.send("Input.dispatchKeyEvent", { type: "keyUp", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13 });
    await page.waitForTimeout(1000);
    expect(await page.inputValue("textarea[name=message]")).toBe("日本");
    await page.keyboard.press("Enter"); // the Enter after it sends
    await page.waitForSelector("li.bubble >> text=日本");
    expect((await entries(thread.id)).map((e) => e.payload.text)).toEqual(["日本"]);
    await context.close();
  });

});

describe("bots and @mentions", () => {
  it("creates a bot from the Bots page and completes its @handle in the composer (or says bots are not there yet)", async () => {
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/bots`);
    if ((await api("/api/agents")).status === 404) {
      // A server without the bots API: the page says so instead of failing.
      await page.waitForSelector("text=no bots API yet");
      const thread = (await api("/api/threads", { method: "POST", json: { title: "no bots" } })).body;
      await page.goto(`${worker.url}/threads/${thread.id}`);
      await page.fill("textarea[name=message]", "hello @");
      expect(await page.$("ul.mentions")).toBeNull();
      await context.close();
      return;
    }
    await page.fill("input[name=name]", "Demo bot");
    await page.fill("input[name=handle]", "demo");
    await page.fill("input[name=model]", "local/scripted-model");
    await page.click("text=Create bot");
    await page.waitForSelector("li[data-agent-id] >> text=@demo");
    const thread = (await api("/api/threads", { method: "POST", json: { title: "mentions" } })).body;
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.click("textarea[name=message]");
    await page.keyboard.type("please @de");
    await page.waitForSelector("ul.mentions >> text=@demo");
    await page.screenshot({ path: join(OUT_DIR, "mention.png") });
    await page.keyboard.press("Tab");
    await page.keyboard.type("look");
    expect(await page.inputValue("textarea[name=message]")).toBe("please @demo look");
    await context.close();
  });

  it("the mention list follows the caret: moved out of a mention by the keyboard, Enter sends; the picked bot is announced", async () => {
    if ((await api("/api/agents")).status === 404) return;
    const handle = `caret${Date.now().toString(36)}`;
    const bot = await api("/api/agents", { method: "POST", json: { name: "Caret bot", handle, model: "local/scripted-model" } });
    expect(bot.status).toBe(201);
    const thread = (await api("/api/threads", { method: "POST", json: { title: "caret" } })).body;
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await page.click("textarea[name=message]");
    await page.keyboard.type(`ask @${handle.slice(0, 4)}`);
    await page.waitForSelector(`ul.mentions >> text=@${handle}`);
    // The message box names the list and the option Enter would take.
    const [controls, active] = await page.$eval("textarea[name=message]", (el) => [el.getAttribute("aria-controls"), el.getAttribute("aria-activedescendant")]);
    expect(await page.$eval(`#${controls}`, (el) => el.getAttribute("role"))).toBe("listbox");
    expect(await page.$eval(`#${active}`, (el) => el.textContent)).toContain(`@${handle}`);
    await page.keyboard.press("Home");
    await page.waitForSelector("ul.mentions", { state: "detached", timeout: 2_000 });
    await page.keyboard.press("Enter");
    await page.waitForSelector(`li.bubble >> text=ask @${handle.slice(0, 4)}`);
    expect(await page.inputValue("textarea[name=message]")).toBe("");
    // Back into a mention with the keyboard, the list comes back.
    await page.keyboard.type(`hi @${handle.slice(0, 3)} there`);
    for (let i = 0; i < " there".length; i++) await page.keyboard.press("ArrowLeft");
    await page.waitForSelector(`ul.mentions >> text=@${handle}`);
    await context.close();
    await api(`/api/agents/${bot.body.id}`, { method: "DELETE" });
  });
});

describe("bots and environments made elsewhere", () => {
  it("appear in the @ completion and the environment pickers of a page opened before they existed, without leaving it", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "made elsewhere" } })).body;
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("form.delegate select[name=environment]");
    const home = await context.newPage();
    await home.goto(worker.url);
    await home.waitForSelector("form select[name=environment]");
    // The pages have loaded their lists; now another client adds to them.
    const suffix = Date.now().toString(36);
    const env = await api("/api/environments", { method: "POST", json: { name: `late-env-${suffix}` } });
    expect(env.status).toBe(201);
    const agents = await api("/api/agents");
    if (agents.status !== 404) {
      expect((await api("/api/agents", { method: "POST", json: { name: "Late", handle: `late${suffix}`, model: "local/scripted-model" } })).status).toBe(201);
      await page.click("textarea[name=message]");
      await page.keyboard.type(`ask @late${suffix.slice(0, 2)}`);
      await page.waitForSelector(`ul.mentions >> text=@late${suffix}`, { timeout: 5000 });
    }
    const options = (p: Page, select: string) => p.$$eval(`${select} option`, (os) => os.map((o) => o.textContent ?? ""));
    await page.focus("form.delegate select[name=environment]");
    await page.waitForFunction((name) => [...document.querySelectorAll("form.delegate select[name=environment] option")].some((o) => o.textContent?.includes(name)), `late-env-${suffix}`, { timeout: 5000 });
    await home.focus("form select[name=environment]");
    await home.waitForFunction((name) => [...document.querySelectorAll("form select[name=environment] option")].some((o) => o.textContent?.includes(name)), `late-env-${suffix}`, { timeout: 5000 });
    expect(await options(home, "form select[name=environment]")).toContainEqual(expect.stringContaining(`late-env-${suffix}`));
    await context.close();
  });
});

describe("the first thread in a new house", () => {
  it("New thread starts on the house's only environment (npm run dev's demo), so its bots can run something; with two it asks", async () => {
    const newcomer = await worker.mintHouseToken("house-ui-first", "newcomer", "owner");
    const demo = (await api("/api/environments", { method: "POST", json: { name: "demo", model: "demo/demo" }, as: newcomer })).body;
    const { context, page } = await signedInPage(newcomer);
    await page.goto(`${worker.url}/`);
    await page.waitForSelector("form select[name=environment] option:has-text('demo')", { state: "attached" });
    expect(await page.inputValue("form select[name=environment]")).toBe(demo.id);
    await page.fill("input[name=title]", "my first");
    await page.click("button:has-text('New thread')");
    // The thread opens, or an error is shown where it was asked for.
    await page.waitForFunction(() => location.pathname.startsWith("/threads/") || document.querySelector(".error"));
    const made = decodeURIComponent(page.url().split("/threads/")[1]);
    expect((await api(`/api/threads/${made}`, { as: newcomer })).body.environmentId).toBe(demo.id);
    // "no environment" is still a choice, and stays chosen
    await page.goto(`${worker.url}/`);
    await page.waitForSelector("form select[name=environment] option:has-text('demo')", { state: "attached" });
    await page.selectOption("form select[name=environment]", "");
    await page.click("button:has-text('New thread')");
    await page.waitForURL(/\/threads\/[^/]+$/);
    expect((await api(`/api/threads/${decodeURIComponent(page.url().split("/threads/")[1])}`, { as: newcomer })).body.environmentId ?? null).toBe(null);
    // which of two to use is the user's to say
    await api("/api/environments", { method: "POST", json: { name: "other", model: "demo/demo" }, as: newcomer });
    await page.goto(`${worker.url}/`);
    await page.waitForSelector("form select[name=environment] option:has-text('other')", { state: "attached" });
    expect(await page.inputValue("form select[name=environment]")).toBe("");
    await context.close();
  });
});

describe("an empty thread", () => {
  it("says a bot answers when mentioned, and how: a first plain message would meet silence", async () => {
    const newcomer = await worker.mintHouseToken("house-ui-hint", "newcomer", "owner");
    const { context, page } = await signedInPage(newcomer);
    const empty = async (threadId: string) => {
      await page.goto(`${worker.url}/threads/${threadId}`);
      await page.waitForSelector(".link-state[data-link=live]");
      return page.locator("section.thread p.empty");
    };
    const plain = (await api("/api/threads", { method: "POST", json: { title: "before bots" }, as: newcomer })).body;
    expect(await (await empty(plain.id)).textContent()).toBe("Nothing here yet: post a message or delegate a task below.");
    const env = (await api("/api/environments", { method: "POST", json: { name: "demo", model: "demo/demo" }, as: newcomer })).body;
    const bot = (await api("/api/agents", { method: "POST", json: { name: "Demo", handle: "demo", model: "demo/demo", environmentId: env.id }, as: newcomer })).body;
    expect(bot.handle).toBe("demo");
    const hinted = await empty(plain.id);
    await expect.poll(() => hinted.textContent()).toBe("Nothing here yet. Bots answer when mentioned: try @demo write hello.txt containing hi, or delegate a task below.");
    const dm = (await api("/api/threads", { method: "POST", json: { title: "dm", parent: { kind: "agent", id: bot.id }, environmentId: env.id }, as: newcomer })).body;
    const direct = await empty(dm.id);
    await expect.poll(() => direct.textContent()).toBe("Nothing here yet: every message here goes to @demo.");
    await context.close();
  });
});

describe("served over plain http at an address that is not loopback (HOST=0.0.0.0 npm run serve, reached by its LAN address)", () => {
  it("New thread and the composer still work: the page is not a secure context, where crypto.randomUUID does not exist", async () => {
    // A name that is not loopback makes the page an insecure context, as a LAN address over http does.
    const lan = await launchBrowser(["--host-resolver-rules=MAP threadbox-lan.test 127.0.0.1"]);
    try {
      const context = await lan.newContext();
      await context.addInitScript((t) => localStorage.setItem("threadbox.token", t), token);
      const page = await context.newPage();
      const origin = worker.url.replace("127.0.0.1", "threadbox-lan.test");
      await page.goto(`${origin}/`);
      expect(await page.evaluate(() => window.isSecureContext)).toBe(false);
      const title = `lan-${Date.now().toString(36)}`;
      await page.fill("input[name=title]", title);
      await page.click("button:has-text('New thread')");
      await page.waitForURL(/\/threads\/[^/]+$/);
      await page.waitForSelector(".link-state[data-link=live]");
      const threadId = new URL(page.url()).pathname.split("/").pop()!;
      await page.click("textarea[name=message]");
      await page.keyboard.type("hello from the LAN");
      await page.keyboard.press("Enter");
      await page.waitForSelector("li.bubble >> text=hello from the LAN");
      expect((await entries(threadId)).filter((e) => e.payload.type === "chat").map((e) => e.payload.text)).toEqual(["hello from the LAN"]);
      await context.close();
    } finally {
      await lan.close();
    }
  }, 60_000);
});

describe("a button pressed twice", () => {
  it("New thread makes one thread", async () => {
    const { context, page } = await signedInPage();
    await page.route("**/api/threads", async (route) => {
      if (route.request().method() === "POST") await new Promise((r) => setTimeout(r, 500)); // a slow answer
      await route.continue();
    });
    await page.goto(`${worker.url}/`);
    const title = `once-${Date.now().toString(36)}`;
    await page.fill("input[name=title]", title);
    await page.dblclick("button:has-text('New thread')");
    await page.waitForURL(/\/threads\/[^/]+$/);
    await page.waitForSelector(".link-state[data-link=live]");
    const made = ((await api("/api/threads?limit=1000")).body.threads as { title: string }[]).filter((t) => t.title === title);
    expect(made).toHaveLength(1);
    await context.close();
  });

  it("Create environment makes one environment, and a bot's Message opens one direct-message thread", async (ctx) => {
    const { context, page } = await signedInPage();
    await page.route(/\/api\/(environments|threads)$/, async (route) => {
      if (route.request().method() === "POST") await new Promise((r) => setTimeout(r, 500)); // a slow answer
      await route.continue();
    });
    await page.goto(`${worker.url}/environments`);
    const name = `once-env-${Date.now().toString(36)}`;
    await page.fill("form.new-env input[name=name]", name);
    await page.dblclick("text=Create environment");
    await page.waitForSelector(`li[data-env-id] >> text=${name}`);
    await page.waitForTimeout(1000);
    const envs = ((await api("/api/environments")).body.environments as { name: string }[]).filter((e) => e.name === name);
    expect(envs).toHaveLength(1);

    if ((await api("/api/agents")).status === 404) { await context.close(); return ctx.skip(); }
    const bot = (await api("/api/agents", { method: "POST", json: { name: "Once", handle: `once${Date.now().toString(36)}`, model: "local/scripted-model" } })).body;
    await page.goto(`${worker.url}/bots`);
    await page.dblclick(`li[data-agent-id="${bot.id}"] button:text-is("Message")`);
    await page.waitForURL(/\/threads\/th_/);
    await page.waitForTimeout(1000);
    const dms = (await api(`/api/threads?parentKind=agent&parent=${bot.id}&limit=10`)).body.threads;
    expect(dms).toHaveLength(1);
    await context.close();
  });
});

describe("an answer lost on its way back (a server restart, a dropped network)", () => {
  /**
   * The first POST to `url` reaches the server, and its answer never reaches the page; later ones
   * pass. Returns each POST's Idempotency-Key as sent.
   */
  async function losingFirstAnswer(page: Page, url: string) {
    const keys: (string | null)[] = [];
    await page.route(url, async (route) => {
      if (route.request().method() !== "POST") return route.continue();
      keys.push((await route.request().headerValue("idempotency-key")) ?? null);
      if (keys.length === 1) {
        await route.fetch();
        return route.abort("connectionreset");
      }
      await route.continue();
    });
    return { keys, sameKey: () => keys.length === 2 && keys[0] !== null && keys[0] === keys[1] };
  }
  const errors = (page: Page) => page.$$eval(".error", (els) => els.map((el) => el.textContent));

  it("New thread is asked again under its Idempotency-Key: one thread, and the page opens it", async () => {
    const { context, page } = await signedInPage();
    const lost = await losingFirstAnswer(page, `${worker.url}/api/threads`);
    await page.goto(`${worker.url}/`);
    const title = `lost-new-${Date.now().toString(36)}`;
    await page.fill("input[name=title]", title);
    await page.click("button:has-text('New thread')");
    // The thread opens, or an error is shown where it was asked for.
    await page.waitForFunction(() => location.pathname.startsWith("/threads/") || document.querySelector(".error"));
    const made = ((await api("/api/threads?limit=1000")).body.threads as { id: string; title: string }[]).filter((t) => t.title === title).map((t) => t.id);
    expect({ made, opened: decodeURIComponent(page.url().split("/threads/")[1]), sameKey: lost.sameKey(), errors: await errors(page) })
      .toEqual({ made: [made[0]], opened: made[0], sameKey: true, errors: [] });
    await context.close();
  });

  it("Delegate and Resume are asked again under their Idempotency-Keys: one child, one run each", async () => {
    const env = (await api("/api/environments", {
      method: "POST",
      json: {
        name: "ui-lost-answer", env: { PI_OFFLINE: "1" }, secrets: { SCRIPTED_MODEL_KEY: MODEL_SECRET },
        piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", models: [{ id: "scripted-model" }] } } },
        piSettings: { retry: { enabled: false } }, model: "local/scripted-model",
      },
    })).body;
    const parent = (await api("/api/threads", { method: "POST", json: { title: "lost delegate", environmentId: env.id } })).body;
    const { context, page } = await signedInPage();
    const delegated = await losingFirstAnswer(page, `${worker.url}/api/threads/${parent.id}/delegate`);
    model.push({ text: "First run done." });
    await page.goto(`${worker.url}/threads/${parent.id}`);
    await page.fill("form.delegate input[name=task]", "say something");
    await page.click("form.delegate button[type=submit]");
    await page.waitForSelector("li.child[data-child-id], form.delegate .error");
    const children = (await api(`/api/threads?parent=${parent.id}`)).body.threads.map((t: { id: string }) => t.id);
    expect({ children: children.length, sameKey: delegated.sameKey(), errors: await errors(page) }).toEqual({ children: 1, sameKey: true, errors: [] });

    const childId = children[0];
    await page.goto(`${worker.url}/threads/${childId}`);
    await page.waitForSelector(".thread-head [data-status=completed]");
    const resumed = await losingFirstAnswer(page, `${worker.url}/api/threads/${childId}/resume`);
    model.push({ text: "Second run done." });
    await page.fill("input[name=resume]", "once more");
    await page.click("button:has-text('Resume')");
    await page.locator("li.bubble-agent", { hasText: "Second run done." }).or(page.locator("section.thread .error")).first().waitFor();
    await page.waitForSelector(".thread-head [data-status=completed]");
    const claims = (await entries(childId)).filter((e) => e.id.startsWith("claim:"));
    expect({ claims: claims.length, sameKey: resumed.sameKey(), errors: await errors(page), box: await page.$("input[name=resume]") === null ? null : await page.inputValue("input[name=resume]") })
      .toEqual({ claims: 2, sameKey: true, errors: [], box: "" });
    await context.close();
  });
});

describe("the Environments page", () => {
  it("shows an environment made elsewhere when the page comes back into view, as the Bots page does", async () => {
    const { context, page } = await signedInPage();
    const listed = page.waitForResponse((r) => r.url() === `${worker.url}/api/environments` && r.request().method() === "GET");
    await page.goto(`${worker.url}/environments`);
    await listed;
    const name = `made-by-cli-${Date.now().toString(36)}`;
    expect((await api("/api/environments", { method: "POST", json: { name } })).status).toBe(201);
    // The reader switches back to this tab (headless Chromium has no other window to come back from).
    await page.evaluate(() => document.dispatchEvent(new Event("visibilitychange")));
    await page.waitForSelector(`li[data-env-id] >> text=${name}`, { timeout: 5000 });
    await context.close();
  });
});

describe("long and right-to-left text", () => {
  it("a 200 KB message is folded to its beginning until asked; a right-to-left title keeps its direction", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "שלום עולם" } })).body;
    const long = "x".repeat(200_000);
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: long } } });
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("li.bubble button.show-all");
    const shown = async () => page.$eval("li.bubble .bubble-text", (el) => (el.firstChild?.textContent ?? "").length);
    expect(await shown()).toBe(4001); // 4000 characters and the ellipsis
    expect(await page.textContent("li.bubble button.show-all")).toBe("Show all (200,000 characters)");
    await page.click("li.bubble button.show-all");
    await page.waitForSelector("li.bubble button.show-all", { state: "detached" });
    expect(await shown()).toBe(200_000);
    expect(await page.getAttribute("h2", "dir")).toBe("auto");
    expect(await page.title()).toBe("שלום עולם · threadbox");
    // Many short lines fold too, at 40 lines; Show less folds again, and keeps the keyboard's place.
    const lines = Array.from({ length: 1500 }, (_, i) => String(i)).join("\n");
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: lines } } });
    const second = "li.bubble:nth-of-type(2)";
    await page.waitForSelector(`${second} button.show-all`);
    const shownLines = async () => page.$eval(`${second} .bubble-text`, (el) => (el.firstChild?.textContent ?? "").split("\n").length);
    expect(await shownLines()).toBe(40);
    await page.focus(`${second} button.show-all`);
    await page.keyboard.press("Enter");
    await page.waitForSelector(`${second} button.show-less`);
    expect(await shownLines()).toBe(1500);
    expect(await page.evaluate(() => document.activeElement?.className)).toContain("show-less");
    await page.click(`${second} button.show-less`);
    await page.waitForSelector(`${second} button.show-all`);
    await page.goto(`${worker.url}/`);
    await page.waitForSelector(`[data-thread-id="${thread.id}"] bdi`);
    await context.close();
  });
});

describe("terminal output", () => {
  it("a command's colours and carriage returns are drawn, not shown as codes, in its output, live or done, and in a chat", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "colours" } })).body;
    const coloured = "\x1b[31mred\x1b[0m plain\nprogress 10%\rprogress 100%\n";
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: [
      { payload: { type: "pi.tool_call", toolCallId: "c1", name: "bash", args: { command: "make" } } },
      { payload: { type: "pi.tool_result", toolCallId: "c1", name: "bash", output: coloured, isError: false } },
      { payload: { type: "pi.tool_call", toolCallId: "c2", name: "bash", args: { command: "make again" } } },
      { payload: { type: "signal.exec.output", execId: "c2", stream: "stdout", text: coloured } },
      { payload: { type: "chat", text: `it said:\n${coloured}` } },
    ] })).status).toBe(201);
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("li.bubble");
    const outputs = await page.$$eval("details.tool pre.output", (els) => els.map((el) => el.textContent));
    expect(outputs).toEqual(["red plain\nprogress 100%\n", "red plain\nprogress 100%\n"]);
    expect(await page.textContent("li.bubble .bubble-text")).toBe("it said:\nred plain\nprogress 100%\n");
    await context.close();
  });
});

describe("a bot's tool that had nowhere to run", () => {
  it("a run_command answered 'no sandbox is bound to this thread' shows as not run, not as a command that succeeded", async () => {
    const { NO_SANDBOX } = await import("../../src/dispatch/tools/no-sandbox");
    const thread = (await api("/api/threads", { method: "POST", json: { title: "no sandbox" } })).body;
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: [
      { payload: { type: "pi.tool_call", toolCallId: "n1", name: "run_command", args: { command: "ls" } } },
      { payload: { type: "pi.tool_result", toolCallId: "n1", name: "run_command", output: NO_SANDBOX, isError: false } },
      { payload: { type: "pi.tool_call", toolCallId: "n2", name: "run_command", args: { command: "pwd" } } },
      { payload: { type: "pi.tool_result", toolCallId: "n2", name: "run_command", output: "exit code 0\n/home", isError: false } },
    ] })).status).toBe(201);
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("details.tool >> nth=1");
    const badges = await page.$$eval("details.tool", (els) => els.map((el) => [el.className, el.querySelector(".tool-state")?.textContent]));
    expect(badges).toEqual([["tool tool-notrun", "not run"], ["tool tool-done", "done"]]);
    const colours = await page.$$eval("details.tool .tool-state", (els) => els.map((el) => getComputedStyle(el).color));
    expect(colours[0]).not.toBe(colours[1]);
    await context.close();
  });
});

describe("managing bots and environments", () => {
  it("edits a bot, opens a DM with it and deletes it; edits an environment's secrets and deletes it", async (ctx) => {
    if ((await api("/api/agents")).status === 404) ctx.skip();
    const env = (await api("/api/environments", { method: "POST", json: { name: "ui-manage", env: { A: "1" }, secrets: { OLD_KEY: "old-value-1" } } })).body;
    const bot = (await api("/api/agents", { method: "POST", json: { name: "Helper", handle: "helper-ui", model: "local/scripted-model", systemPrompt: "be brief", environmentId: env.id } })).body;
    const { context, page } = await signedInPage();
    page.on("dialog", (d) => void d.accept());
    await page.goto(`${worker.url}/bots`);
    const card = `li[data-agent-id="${bot.id}"]`;
    await page.click(`${card} >> text=Edit`);
    expect(await page.inputValue(`${card} textarea[name=systemPrompt]`)).toBe("be brief");
    await page.screenshot({ path: join(OUT_DIR, "bot-edit.png"), fullPage: true });
    await page.selectOption(`${card} select[name=triggerMode]`, "always");
    await page.fill(`${card} textarea[name=systemPrompt]`, "");
    await page.uncheck(`${card} input[name=tool-run_command]`);
    await page.click(`${card} >> text=Save bot`);
    await page.waitForSelector(`${card} >> text=answers every message`);
    const edited = (await api(`/api/agents/${bot.id}`)).body;
    expect({ triggerMode: edited.triggerMode, systemPrompt: edited.systemPrompt ?? null, runCommand: edited.tools.includes("run_command") })
      .toEqual({ triggerMode: "always", systemPrompt: null, runCommand: false });

    // Message: a DM thread whose parent is the bot, opened at once.
    await page.click(`${card} button:text-is("Message")`);
    await page.waitForURL(/\/threads\/th_/);
    const dmId = page.url().split("/threads/")[1].replace(/\/$/, "");
    // In the bot's environment, so its tools have a box there.
    expect((await api(`/api/threads/${dmId}`)).body).toMatchObject({ parent: { kind: "agent", id: bot.id }, environmentId: env.id });
    await page.waitForSelector("text=direct messages with");
    expect(await page.title()).toBe("DM with @helper-ui · threadbox");
    // Message again: the same DM, not another.
    await page.goto(`${worker.url}/bots`);
    await page.click(`${card} button:text-is("Message")`);
    await page.waitForFunction((id) => location.pathname === `/threads/${id}`, dmId);

    // A bot whose environment is gone says so when edited, instead of failing to save.
    const gone = (await api("/api/environments", { method: "POST", json: { name: "short-lived" } })).body;
    const orphan = (await api("/api/agents", { method: "POST", json: { name: "Orphan", handle: "orphan-ui", model: "local/scripted-model", environmentId: gone.id } })).body;
    expect((await api(`/api/environments/${gone.id}`, { method: "DELETE" })).status).toBe(204);
    await page.goto(`${worker.url}/bots`);
    await page.waitForSelector(`li[data-agent-id="${orphan.id}"] >> text=(deleted)`);
    await page.click(`li[data-agent-id="${orphan.id}"] >> text=Edit`);
    await page.waitForSelector(`li[data-agent-id="${orphan.id}"] .error >> text=was deleted`);
    await page.selectOption(`li[data-agent-id="${orphan.id}"] select[name=environmentId]`, "");
    await page.click(`li[data-agent-id="${orphan.id}"] >> text=Save bot`);
    await page.waitForSelector(`li[data-agent-id="${orphan.id}"] button:text-is("Message")`);
    expect((await api(`/api/agents/${orphan.id}`)).body.environmentId ?? null).toBeNull();

    await page.click(`${card} >> text=Delete`);
    await page.waitForSelector(card, { state: "detached" });
    expect((await api(`/api/agents/${bot.id}`)).status).toBe(404);

    await page.goto(`${worker.url}/environments`);
    const envCard = `li[data-env-id="${env.id}"]`;
    await page.click(`${envCard} >> text=Edit`);
    expect(await page.inputValue(`${envCard} textarea[name=env]`)).toBe("A=1");
    await page.fill(`${envCard} textarea[name=env]`, "A=2\nB=3");
    await page.check(`${envCard} input[name=remove-secret-OLD_KEY]`);
    await page.fill(`${envCard} input[name=secret-name-0]`, "NEW_KEY");
    await page.fill(`${envCard} input[name=secret-value-0]`, "new-value-2");
    await page.screenshot({ path: join(OUT_DIR, "environment-edit.png"), fullPage: true });
    await page.click(`${envCard} >> text=Save environment`);
    await page.waitForSelector(`${envCard} code.secret-name >> text=NEW_KEY`);
    const saved = (await api(`/api/environments/${env.id}`)).body;
    expect({ env: saved.env, secretNames: saved.secretNames }).toEqual({ env: { A: "2", B: "3" }, secretNames: ["NEW_KEY"] });
    expect(JSON.stringify(saved)).not.toContain("new-value-2");
    await page.click(`${envCard} >> text=Delete`);
    await page.waitForSelector(envCard, { state: "detached" });
    expect((await api(`/api/environments/${env.id}`)).status).toBe(404);
    await context.close();
  });
});

describe("stop and resume", () => {
  it("stops a running child from its page, then resumes it with a message", async () => {
    const env = (await api("/api/environments", {
      method: "POST",
      json: {
        name: "ui-stop", env: { PI_OFFLINE: "1", THREADBOX_HEARTBEAT_MS: "500" }, secrets: { SCRIPTED_MODEL_KEY: MODEL_SECRET },
        piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", models: [{ id: "scripted-model" }] } } },
        piSettings: { retry: { enabled: false } }, model: "local/scripted-model",
      },
    })).body;
    const parent = (await api("/api/threads", { method: "POST", json: { title: "stoppable", environmentId: env.id } })).body;
    // pi keeps its session file once an assistant turn exists: stop it inside a long tool call,
    // one that prints before it naps, so its output shows while it runs.
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "for i in $(seq 1 80); do echo line $i; done; sleep 60" } }] });
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${parent.id}`);
    await page.fill("form.delegate input[name=task]", "take a long nap");
    await page.click("form.delegate button[type=submit]");
    await page.click("li.child[data-child-id] a");
    await page.waitForSelector("details.tool[data-tool=bash].tool-running");
    // The running call's card opens by itself with its output, scrolled to the newest line.
    await page.waitForSelector("details.tool[data-tool=bash][open] pre.output.live >> text=line 80");
    const live = await page.$eval("details.tool[data-tool=bash] pre.output.live", (el) => ({ bottom: el.scrollHeight - el.scrollTop - el.clientHeight, scrolls: el.scrollHeight > el.clientHeight }));
    expect(live.scrolls).toBe(true);
    expect(live.bottom).toBeLessThan(24);
    // At phone width the run's buttons wrap under the title, on screen.
    await page.setViewportSize({ width: 390, height: 800 });
    const stop = (await (await page.$("button:has-text('Stop')"))!.boundingBox())!;
    expect(stop.x + stop.width).toBeLessThanOrEqual(390);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await page.screenshot({ path: join(OUT_DIR, "phone-running.png") });
    await page.setViewportSize({ width: 1100, height: 860 });
    // A read-only token watches the same run: it is offered neither Stop nor Interrupt, nor a port of its box.
    const runningId = decodeURIComponent(page.url().split("/threads/")[1]);
    const viewer = await signedInPage(await worker.mintHouseToken("house-ui", "ui-viewer", "viewer"));
    await viewer.page.goto(`${worker.url}/threads/${runningId}`);
    await viewer.page.waitForSelector(".thread-head [data-status=running]");
    await viewer.page.waitForSelector("details.tool[data-tool=bash]");
    expect([await viewer.page.locator("button:has-text('Stop')").count(), await viewer.page.locator("button:has-text('Interrupt')").count()]).toEqual([0, 0]);
    await viewer.page.goto(`${worker.url}/sandboxes`);
    await viewer.page.waitForSelector(`tbody tr:has-text("${runningId}") .box-live`);
    expect(await viewer.page.locator("form.preview").count()).toBe(0);
    await page.dblclick("button:has-text('Stop')"); // a double click stops it once, and says nothing of a second stop
    await page.waitForSelector(".thread-head [data-status=failed]");
    expect(await page.textContent(".thread-head .badge")).toContain("stopped");
    expect(await page.$$eval("section.thread .error", (els) => els.map((el) => el.textContent))).toEqual([]);
    expect(await page.$("button:has-text('Stop')")).toBeNull();
    // The stopped run's processes end before the resume, which continues pi's session on the same box.
    const childId = decodeURIComponent(page.url().split("/threads/")[1]);
    const launched = (await entries(childId)).find((e) => e.payload.type === "signal.run.launched")!;
    await waitFor("the stopped run's processes to end", () => processesOfRun(launched.payload.runId) === 0);
    // Nor Resume, once it is stopped.
    await viewer.page.goto(`${worker.url}/threads/${childId}`);
    await viewer.page.waitForSelector(".thread-head [data-status=failed]");
    expect(await viewer.page.locator("input[name=resume]").count()).toBe(0);
    await viewer.context.close();

    model.push({ text: "Awake again, all done." });
    await page.fill("input[name=resume]", "wake up and finish");
    await page.click("button:has-text('Resume')");
    await page.waitForSelector("li.bubble-agent >> text=Awake again, all done.");
    await page.waitForSelector(".thread-head [data-status=completed]");
    expect(JSON.stringify(model.requests.at(-1)!.messages)).toContain("wake up and finish");
    await context.close();
  });
});

describe("a child that failed", () => {
  it("its result on the parent reads as a failure, not as a green answer", async () => {
    // Its model is a port nobody listens on: the run is stopped before it could get anywhere.
    const env = (await api("/api/environments", {
      method: "POST",
      json: {
        name: "ui-doomed", env: { PI_OFFLINE: "1" }, secrets: { SCRIPTED_MODEL_KEY: MODEL_SECRET },
        piModels: { providers: { local: { baseUrl: "http://127.0.0.1:9/v1", api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", models: [{ id: "scripted-model" }] } } },
        piSettings: { retry: { enabled: false } }, model: "local/scripted-model",
      },
    })).body;
    const parent = (await api("/api/threads", { method: "POST", json: { title: "doomed parent", environmentId: env.id } })).body;
    const { childThreadId } = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "never mind" } })).body;
    expect((await api(`/api/threads/${childThreadId}/stop`, { method: "POST" })).status).toBe(200);
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${parent.id}`);
    const bubble = `li.bubble-agent:has-text("${childThreadId} ended")`;
    await page.waitForSelector(bubble);
    expect(await page.textContent(`${bubble} .bubble-head`)).toContain("stopped");
    const look = await page.$eval(bubble, (el) => ({ outcome: el.getAttribute("data-outcome"), background: getComputedStyle(el).backgroundColor, author: getComputedStyle(el.querySelector(".bubble-head b")!).color }));
    expect(look).toEqual({ outcome: "failed", background: "rgb(255, 245, 245)", author: "rgb(201, 42, 42)" });
    await context.close();
  });
});

describe("a read-only token", () => {
  it("is offered no writes: no New thread, composer, Delegate, environment or bot forms, and says why", async () => {
    const env = (await api("/api/environments", { method: "POST", json: { name: "ui-read-only-env" } })).body;
    const thread = (await api("/api/threads", { method: "POST", json: { title: "watched by a viewer", environmentId: env.id } })).body;
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { id: "ro-1", payload: { type: "chat", text: "for your eyes only" } } })).status).toBe(201);
    const bot = await api("/api/agents", { method: "POST", json: { name: "Watched", handle: `ro-${Date.now().toString(36)}`, model: "local/scripted-model" } });
    if (bot.status !== 404) expect(bot.status).toBe(201); // 404: a server without bots
    for (const role of ["viewer", "reader"]) {
      const { context, page } = await signedInPage(await worker.mintHouseToken("house-ui", `ui-${role}`, role));
      const count = (selector: string) => page.locator(selector).count();
      await page.goto(worker.url);
      await page.waitForSelector(`.tree-row[data-thread-id="${thread.id}"]`);
      expect(await page.textContent(".topbar")).toContain("read-only");
      expect([await count("input[name=title]"), await count("button:has-text('New thread')")]).toEqual([0, 0]);
      expect(await page.textContent("main [data-read-only]")).toContain(`role ${role}`);

      await page.goto(`${worker.url}/threads/${thread.id}`);
      await page.waitForSelector("li.bubble >> text=for your eyes only");
      expect([await count("textarea[name=message]"), await count("form.delegate"), await count("button:has-text('Send')")]).toEqual([0, 0, 0]);
      expect(await page.textContent("section.thread [data-read-only]")).toContain("read-only");

      await page.goto(`${worker.url}/environments`);
      await page.waitForSelector(`li[data-env-id="${env.id}"]`);
      expect([await count("form.new-env"), await count(`li[data-env-id="${env.id}"] button`)]).toEqual([0, 0]);
      expect(await count("main [data-read-only]")).toBe(1);

      if (bot.status === 201) {
        await page.goto(`${worker.url}/bots`);
        await page.waitForSelector(`li[data-agent-id="${bot.body.id}"]`);
        expect([await count("form.bot-form"), await count(`li[data-agent-id="${bot.body.id}"] button:has-text('Edit')`), await count(`li[data-agent-id="${bot.body.id}"] button:has-text('Delete')`)]).toEqual([0, 0, 0]);
        expect(await count("main [data-read-only]")).toBe(1);
      }
      await context.close();
    }
    if (bot.status === 201) expect((await api(`/api/agents/${bot.body.id}`, { method: "DELETE" })).status).toBe(204);
    expect((await api(`/api/environments/${env.id}`, { method: "DELETE" })).status).toBe(204);
  });
});

describe("entry times", () => {
  it("an entry from today shows its time of day; read on a later day, it shows its date too", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "dated" } })).body;
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { id: "dated-1", payload: { type: "chat", text: "said on its day" } } })).status).toBe(201);
    const ts = (await entries(thread.id)).find((e) => e.id === "dated-1")!.ts;
    /** The bubble's head (author and time) as the reader sees it, on a browser whose clock says `clock`. */
    const shown = async (clock?: number) => {
      const context = await browser.newContext({ locale: "en-US", timezoneId: "UTC" });
      await context.addInitScript((t) => localStorage.setItem("threadbox.token", t), token);
      const page = await context.newPage();
      if (clock) await page.clock.setSystemTime(clock);
      await page.goto(`${worker.url}/threads/${thread.id}`);
      const head = page.locator("li.bubble:has-text('said on its day') .bubble-head");
      await head.waitFor();
      const text = await head.textContent();
      await context.close();
      return text;
    };
    const utc = (o: Intl.DateTimeFormatOptions) => new Date(ts).toLocaleString("en-US", { timeZone: "UTC", ...o });
    const hms = { hour: "2-digit", minute: "2-digit", second: "2-digit" } as const;
    const day = utc({ month: "short", day: "numeric" });
    const today = await shown();
    expect(today).toContain(new Date(ts).toLocaleTimeString("en-US", { timeZone: "UTC", ...hms }));
    expect(today).not.toContain(day);
    expect(await shown(ts + 3 * 24 * 3600_000)).toContain(utc({ month: "short", day: "numeric", ...hms }));
  });

  it("a page left open over midnight gains the date on yesterday's times, with nothing new arriving", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "overnight" } })).body;
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { id: "night-1", payload: { type: "chat", text: "said before midnight" } } })).status).toBe(201);
    const ts = (await entries(thread.id)).find((e) => e.id === "night-1")!.ts;
    const context = await browser.newContext({ locale: "en-US", timezoneId: "UTC" });
    await context.addInitScript((t) => localStorage.setItem("threadbox.token", t), token);
    const page = await context.newPage();
    await page.clock.install({ time: ts + 1000 });
    await page.goto(`${worker.url}/threads/${thread.id}`);
    const head = page.locator("li.bubble:has-text('said before midnight') .bubble-head time");
    await head.waitFor();
    const utc = (o: Intl.DateTimeFormatOptions) => new Date(ts).toLocaleString("en-US", { timeZone: "UTC", ...o });
    const hms = { hour: "2-digit", minute: "2-digit", second: "2-digit" } as const;
    expect(await head.textContent()).toBe(new Date(ts).toLocaleTimeString("en-US", { timeZone: "UTC", ...hms }));
    const nextMidnight = new Date(ts).setUTCHours(24, 0, 0, 0);
    // No timer is run by hand: the page must notice the new day on its own, as it would overnight.
    await page.clock.setSystemTime(nextMidnight + 60_000);
    await expect.poll(() => head.textContent(), { timeout: 12_000 }).toBe(utc({ month: "short", day: "numeric", ...hms }));
    await context.close();
  });
});

describe("reconnecting", () => {
  it("says it is reconnecting as soon as the browser goes offline, and is live again when it is back, missing nothing", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "offline" } })).body;
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await context.setOffline(true);
    await page.waitForSelector(".link-state[data-link=reconnecting]", { timeout: 3000 }); // not after a 15 s ping
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "while you were away" } } });
    await context.setOffline(false);
    await page.waitForSelector(".link-state[data-link=live]", { timeout: 5000 });
    await page.waitForSelector("li.bubble >> text=while you were away");
    await context.close();
  });

  it("after a dropped socket (or one closed with 1013), resumes from its last offset: no gap, no duplicate", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "flaky network" } })).body;
    const post = (text: string) => api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text } } });
    const { context, page } = await signedInPage();
    const routes: WebSocketRoute[] = [];
    let hold: Promise<void> = Promise.resolve();
    let seen: string[] = [];
    await page.routeWebSocket(/\/subscribe/, async (ws) => {
      routes.push(ws);
      await hold;
      // A stale copy of what the page already has, as a flaky proxy might replay it.
      for (const frame of seen) ws.send(frame);
      ws.connectToServer();
    });
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    for (const t of ["one", "two", "three"]) await post(t);
    await page.waitForFunction(() => document.querySelectorAll("li.bubble").length === 3);
    expect(new URL(routes[0].url()).searchParams.get("offset")).toBe("-1");

    seen = (await entries(thread.id)).map((e) => JSON.stringify(e));
    let release!: () => void;
    hold = new Promise((r) => { release = r; });
    // What the server sends a subscriber it held back too long: reconnect from the last offset.
    await routes[0].close({ code: 1013, reason: "subscriber too slow: reconnect from your last offset" });
    for (const t of ["four", "five", "six"]) await post(t); // written while the page is cut off
    release();

    await page.waitForFunction(() => document.querySelectorAll("li.bubble").length >= 6);
    const all = await entries(thread.id);
    expect(routes.length).toBe(2);
    expect(new URL(routes[1].url()).searchParams.get("offset")).toBe(all[2].offset); // resumed after "three"
    for (const t of ["seven"]) await post(t); // and live again afterwards
    await page.waitForFunction(() => document.querySelectorAll("li.bubble").length >= 7);
    expect(await bubbles(page)).toEqual((await entries(thread.id)).map((e) => [e.offset, e.payload.text]));
    await context.close();
  });

  it("rides out a worker restart: shows it is reconnecting, then carries on from where it was", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "worker restart" } })).body;
    const post = (text: string) => api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text } } });
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await post("before");
    await page.waitForSelector("li.bubble >> text=before");

    await worker.stop({ keepState: true });
    await page.waitForSelector(".link-state[data-link=reconnecting]");
    worker = await startWorker({ port: worker.port, persistTo: worker.persistTo, vars: worker.vars });
    await page.waitForSelector(".link-state[data-link=live]", { timeout: 60_000 });
    await post("after");
    await page.waitForSelector("li.bubble >> text=after");
    expect(await bubbles(page)).toEqual((await entries(thread.id)).map((e) => [e.offset, e.payload.text]));
    await context.close();
  });
});

describe("layout under load", () => {
  /** The newest chat bubble is on screen. */
  const lastBubbleInView = () => {
    const all = document.querySelectorAll("li.bubble");
    const r = all[all.length - 1]?.getBoundingClientRect();
    return !!r && r.top >= 0 && r.bottom <= innerHeight;
  };

  it("a long thread opens at its newest entry, and keeps following what arrives", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "long thread" } })).body;
    const batch = Array.from({ length: 300 }, (_, i) => ({ payload: { type: "chat", text: `entry number ${i}` } }));
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: batch })).status).toBe(201);
    const { context, page } = await signedInPage();
    for (let load = 0; load < 3; load++) {
      await page.goto(`${worker.url}/threads/${thread.id}`);
      await page.waitForSelector("li.bubble >> text=entry number 299");
      await page.waitForFunction(lastBubbleInView, undefined, { timeout: 5_000 });
    }
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "one more" } } });
    await page.waitForSelector("li.bubble >> text=one more");
    await page.waitForFunction(lastBubbleInView, undefined, { timeout: 5_000 });
    await context.close();
  });

  it("a thread of thousands of entries opens at its newest, stays live, and shows earlier ones on request (keyboard too)", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "thousands" } })).body;
    const N = 3000;
    for (let b = 0; b < N; b += 500) {
      const batch = Array.from({ length: 500 }, (_, j) => {
        const i = b + j;
        return i % 3 === 0 ? { payload: { type: "chat", text: `entry number ${i}` } }
          : i % 3 === 1 ? { payload: { type: "pi.tool_call", toolCallId: `c${i}`, name: "bash", args: { command: `echo ${i}` } } }
          : { payload: { type: "pi.tool_result", toolCallId: `c${i - 1}`, name: "bash", output: `out ${i}\n`.repeat(20), isError: false } };
      });
      expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: batch })).status).toBe(201);
    }
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(`li.bubble >> text=entry number ${N - 3}`, { timeout: 30_000 });
    await page.waitForFunction(lastBubbleInView, undefined, { timeout: 5_000 });
    // Not every one of the 2,000 items is drawn (nor drawn again on each arrival).
    const drawn = await page.$$eval("ol.timeline > li", (els) => els.length);
    expect(drawn).toBeLessThanOrEqual(600);
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "one more live" } } });
    await page.waitForSelector("li.bubble >> text=one more live", { timeout: 5_000 });
    await page.waitForFunction(lastBubbleInView, undefined, { timeout: 5_000 });
    // The earliest entry is there for whoever asks, from the keyboard as well.
    await page.focus("button.show-earlier");
    while (await page.$("button.show-earlier")) {
      await page.keyboard.press("Enter");
      await page.waitForTimeout(50);
    }
    await page.waitForSelector("li.bubble >> text='entry number 0'");
    expect((await bubbles(page)).length).toBe(N / 3 + 1);
    await context.close();
  }, 120_000);

  it("typing in the composer at the page's foot as entries arrive: it stays in view, the newest entries appear above it", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "typing while it runs" } })).body;
    const batch = Array.from({ length: 300 }, (_, i) => ({ payload: { type: "chat", text: `entry number ${i}` } }));
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: batch })).status).toBe(201);
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("li.bubble >> text=entry number 299");
    await page.waitForFunction(lastBubbleInView, undefined, { timeout: 5_000 });
    await page.focus("textarea[name=message]");
    await page.keyboard.type("half a thought");
    const composerInView = () => {
      const r = document.querySelector("textarea[name=message]")!.getBoundingClientRect();
      return r.top >= 0 && r.bottom <= innerHeight;
    };
    // Past the page's own scroll after an arrival (its effects run after a frame).
    const settled = () => page.evaluate(async () => {
      for (let i = 0; i < 3; i++) await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    });
    expect(await page.evaluate(composerInView)).toBe(true);
    for (let i = 0; i < 3; i++) {
      expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: `arrived ${i}` } } })).status).toBe(201);
      await page.waitForSelector(`li.bubble >> text='arrived ${i}'`);
      await settled();
      expect([i, await page.evaluate(composerInView), await page.evaluate(lastBubbleInView)]).toEqual([i, true, true]);
    }
    expect(await page.inputValue("textarea[name=message]")).toBe("half a thought");
    await context.close();
  });

  it("a thread of thousands keeps following through catch-up and live batches: at most a page of items drawn, each entry once and in order", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "thousands, tall and short" } })).body;
    // A coding agent's run: mostly calls and their output, and at the end tall answers. As short
    // entries arrive, the tall ones drawn at the top are let go, and the end of the timeline moves up.
    const N = 5000;
    const tall = (i: number) => `tall answer ${i}\n${"a line of the answer\n".repeat(25)}`;
    for (let b = 0; b < N; b += 500) {
      const batch = Array.from({ length: 500 }, (_, j) => {
        const i = b + j;
        return i >= N - 600 ? { payload: { type: "chat", text: tall(i) } }
          : i % 2 === 0 ? { payload: { type: "pi.tool_call", toolCallId: `c${i}`, name: "bash", args: { command: `echo ${i}` } } }
          : { payload: { type: "pi.tool_result", toolCallId: `c${i - 1}`, name: "bash", output: `out ${i}\n`.repeat(10), isError: false } };
      });
      expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: batch })).status).toBe(201);
    }
    const { context, page } = await signedInPage();
    const drawn = () => page.$$eval("ol.timeline > li:not(.earlier)", (els) => els.length);
    const post = (texts: string[]) => api(`/api/threads/${thread.id}/entries`, { method: "POST", json: texts.map((text) => ({ payload: { type: "chat", text } })) });
    // Some arrive while the page catches up, the rest once it has.
    const opening = page.goto(`${worker.url}/threads/${thread.id}`);
    for (let b = 0; b < 5; b++) expect((await post(Array.from({ length: 10 }, (_, j) => `during catch-up ${b * 10 + j}`))).status).toBe(201);
    await opening;
    await page.waitForSelector("li.bubble >> text='during catch-up 49'", { timeout: 60_000 });
    for (let b = 0; b < 10; b++) {
      expect((await post(Array.from({ length: 10 }, (_, j) => `live ${b * 10 + j}`))).status).toBe(201);
      await page.waitForSelector(`li.bubble >> text='live ${b * 10 + 9}'`, { timeout: 30_000 });
      await page.waitForFunction(lastBubbleInView, undefined, { timeout: 10_000 });
      expect(await drawn()).toBeLessThanOrEqual(500);
    }
    // What is drawn is the thread's newest chats, each once, in order.
    const chats = (await entries(thread.id)).filter((e) => e.payload.type === "chat").map((e) => [e.offset, String(e.payload.text)]);
    const shown = await bubbles(page);
    expect(shown.length).toBeGreaterThan(100);
    expect(shown).toEqual(chats.slice(-shown.length));
    // Earlier ones are there on request.
    const firstShown = shown[0][0];
    await page.click("button.show-earlier");
    await page.waitForFunction((offset) => document.querySelector(`li.bubble[data-offset="${offset}"]`)?.previousElementSibling?.matches("li.bubble"), firstShown);
    expect(await drawn()).toBeGreaterThan(500);
    await context.close();
  }, 180_000);

  it("a phone-width screen keeps every link and a run's wide files inside the page; a tool's non-text output is shown as JSON", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "narrow" } })).body;
    const wide = Array.from({ length: 50 }, (_, i) => `${i} ${"x".repeat(600)}`).join("\n");
    expect((await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: [
      { payload: { type: "pi.tool_call", toolCallId: "c1", name: "probe", args: {} } },
      { payload: { type: "pi.tool_result", toolCallId: "c1", name: "probe", output: { ok: true, n: 3 }, isError: false } },
    ] })).status).toBe(201);
    // A run's artifacts come from its box, with the token the launch mints for that run.
    const { SignJWT } = await import("jose");
    const runToken = await new SignJWT({ kind: "stream", house: "house-ui", thread: thread.id, scope: "stream:write", run: "r1" })
      .setProtectedHeader({ alg: "HS256" }).setIssuer("threadbox").setSubject("ui-user").setIssuedAt().setExpirationTime("10m")
      .sign(new TextEncoder().encode("test-token-secret-0123456789abcdef"));
    const files = await fetch(`${worker.url}/api/threads/${thread.id}/entries`, {
      method: "POST", headers: { authorization: `Bearer ${runToken}`, "content-type": "application/json" },
      body: JSON.stringify({ payload: { type: "artifact.files", runId: "r1", files: [{ path: "min.js", status: "added", size: wide.length, content: wide }] } }),
    });
    expect(files.status).toBe(201);
    const context = await browser.newContext({ viewport: { width: 375, height: 740 } });
    await context.addInitScript((t) => localStorage.setItem("threadbox.token", t), token);
    const page = await context.newPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("[data-kind=artifacts]");
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
    const signOut = await page.$("text=Sign out");
    const box = await signOut!.boundingBox();
    expect(box!.x + box!.width).toBeLessThanOrEqual(375);
    expect(await page.textContent("body")).not.toContain("[object Object]");
    expect(await page.textContent("body")).toContain('"ok": true');
    await page.goto(`${worker.url}/sandboxes`);
    await page.waitForSelector("h2");
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
    await context.close();
  });

  it("delegating from a thread without an environment waits for one to be picked (the run needs its model)", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "no environment" } })).body;
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    // The header says so first: a bot here has no box to work in.
    expect(await (await page.waitForSelector(".thread-head [data-environment='']")).textContent()).toBe("no environment");
    await page.fill("form.delegate input[name=task]", "write a.txt containing b");
    expect(await page.isDisabled("form.delegate button[type=submit]")).toBe(true);
    const envOption = await page.$$eval("form.delegate select[name=environment] option", (os) => os.map((o) => (o as HTMLOptionElement).value).filter(Boolean));
    if (envOption.length > 0) {
      await page.selectOption("form.delegate select[name=environment]", envOption[0]);
      expect(await page.isDisabled("form.delegate button[type=submit]")).toBe(false);
    }
    await context.close();
  });

  it("the thread list offers older threads past its first page instead of dropping them", async () => {
    const { context, page } = await signedInPage();
    await page.route("**/api/threads?*", async (route) => {
      // A house with more threads than one page: the first page is full, the next one is not.
      const url = new URL(route.request().url());
      const mk = (i: number) => ({ id: `th_fake${i}`, parent: { kind: "none", id: null }, status: "idle", reason: null, title: `fake ${i}`, environmentId: null, boxId: null, createdAt: new Date(2026, 0, 1, 0, 0, 0, 5000 - i).toISOString(), updatedAt: new Date(2026, 0, 1).toISOString() });
      const page0 = url.searchParams.get("before") === null;
      const threads = page0 ? Array.from({ length: 1000 }, (_, i) => mk(i)) : [mk(1000), mk(1001)];
      await route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify({ threads }) });
    });
    await page.goto(`${worker.url}/`);
    await page.waitForSelector("text=Show older threads");
    expect(await page.$("text=fake 1001")).toBeNull();
    await page.click("text=Show older threads");
    await page.waitForSelector("text=fake 1001");
    expect(await page.$("text=Show older threads")).toBeNull();
    await context.close();
  });
});

describe("entries the UI does not expect", () => {
  it("a malformed or unknown entry is shown as what it is, without breaking the page or the entries after it", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "odd entries" } })).body;
    const odd = [
      { type: "pi.assistant", text: "round with odd calls", toolCalls: [null, 5, "x", { id: { no: 1 }, name: ["n"] }] },
      { type: "pi.tool_call", toolCallId: "e1", name: "edit", args: { path: "a.txt", edits: [null, 3] } },
      { type: "pi.tool_call", toolCallId: "e2", name: "write", args: null },
      { type: "pi.tool_result", toolCallId: { x: 1 }, output: null },
      // (output under the run's own call: only the writer of a call may post its output)
      { type: "signal.exec.output", execId: "e1", text: { not: "text" } },
      { type: "artifact.folder", runId: "odd", status: "failed", folders: "not-a-list", error: { code: 1 } },
      { type: "artifact.files", runId: "odd", files: [null, 4, { path: { x: 1 }, status: ["a"], size: { b: 1 }, omitted: 5, content: { c: 1 } }] },
      { type: "artifact.diff", runId: "odd", diff: { d: 1 }, status: 3 },
      { type: "pi.something_new", whatever: [1, 2, 3] },
      { type: "signal.something_new", reason: { r: 1 } },
    ];
    // A run's token, as its box writes with: artifacts and run signals are a run's to write.
    const { SignJWT } = await import("jose");
    const runToken = await new SignJWT({ kind: "stream", house: "house-ui", thread: thread.id, scope: "stream:write", run: "odd" })
      .setProtectedHeader({ alg: "HS256" }).setIssuer("threadbox").setSubject("ui-user").setIssuedAt().setExpirationTime("10m")
      .sign(new TextEncoder().encode("test-token-secret-0123456789abcdef"));
    // The run claims the thread first: a run's token writes only while its run is the current one.
    const claim = await fetch(`${worker.url}/api/threads/${thread.id}/entries`, {
      method: "POST", headers: { authorization: `Bearer ${runToken}`, "content-type": "application/json" },
      body: JSON.stringify({ id: "claim:odd", payload: { type: "signal.thread.status_changed", status: "running", reason: "odd entries", runId: "odd" } }),
    });
    expect(claim.status).toBe(201);
    for (const payload of odd) {
      const r = await fetch(`${worker.url}/api/threads/${thread.id}/entries`, {
        method: "POST", headers: { authorization: `Bearer ${runToken}`, "content-type": "application/json" }, body: JSON.stringify({ payload }),
      });
      expect([payload.type, r.status]).toEqual([payload.type, 201]);
    }
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "still here after them" } } });
    const { context, page } = await signedInPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("li.bubble >> text=still here after them", { timeout: 10_000 });
    await page.waitForSelector("li.bubble >> text=round with odd calls");
    expect(errors).toEqual([]);
    // Named for what they are, not dumped nor shown as "[object Object]".
    await page.waitForSelector("li[data-kind='pi.something_new']");
    await page.waitForSelector("li[data-kind='signal.something_new']");
    expect(await page.textContent("ol.timeline")).not.toContain("[object Object]");
    // And it stays live.
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "and live" } } });
    await page.waitForSelector("li.bubble >> text=and live");
    expect(errors).toEqual([]);
    await context.close();
  });
});

describe("long lines", () => {
  it("an unbroken line in an error, a signal's reason, a tool's name or a file's path stays inside a phone-width page", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "long lines" } })).body;
    const long = "x".repeat(3000);
    const { SignJWT } = await import("jose");
    const runToken = await new SignJWT({ kind: "stream", house: "house-ui", thread: thread.id, scope: "stream:write", run: "rl" })
      .setProtectedHeader({ alg: "HS256" }).setIssuer("threadbox").setSubject("ui-user").setIssuedAt().setExpirationTime("10m")
      .sign(new TextEncoder().encode("test-token-secret-0123456789abcdef"));
    for (const payload of [
      { type: "pi.error", message: `failed: ${long}` },
      { type: "signal.run.something", reason: long.slice(0, 500) },
      { type: "pi.tool_call", toolCallId: "l1", name: `tool_${long.slice(0, 300)}`, args: { command: long } },
      { type: "pi.tool_result", toolCallId: "l1", output: long, isError: false },
      { type: "artifact.files", runId: "rl", files: [{ path: `dir/${long.slice(0, 500)}.txt`, status: "added", size: 1 }] },
      { type: "chat", text: `see ${long}` },
    ]) {
      const r = await fetch(`${worker.url}/api/threads/${thread.id}/entries`, {
        method: "POST", headers: { authorization: `Bearer ${payload.type === "artifact.files" ? runToken : token}`, "content-type": "application/json" }, body: JSON.stringify({ payload }),
      });
      expect([payload.type, r.status]).toEqual([payload.type, 201]);
    }
    const context = await browser.newContext({ viewport: { width: 375, height: 740 } });
    await context.addInitScript((t) => localStorage.setItem("threadbox.token", t), token);
    const page = await context.newPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector("[data-kind=artifacts]");
    await page.waitForSelector("li.bubble >> text=see");
    await page.click("details.tool summary");
    // Each thing in the timeline that reaches past the screen (a scrolling box may hold more, within the screen).
    const wide = await page.evaluate(() => [...document.querySelectorAll("ol.timeline *")]
      .filter((el) => !el.closest("pre, .diff, .tool-summary")
        && (el.getBoundingClientRect().right > innerWidth + 1 || (getComputedStyle(el).overflowX === "visible" && el.scrollWidth > el.clientWidth + 1)))
      .map((el) => `${el.tagName.toLowerCase()}.${el.className}`));
    await page.screenshot({ path: join(OUT_DIR, "long-lines.png") });
    expect(wide).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
    await context.close();
  });
});

describe("markup in what others wrote", () => {
  it("HTML and script in titles, chat, tool output, file names, environment and bot names are shown as text, never run", async () => {
    const evil = (tag: string) => `<img src=x onerror="window.__xss=(window.__xss||[]).concat('${tag}')"><script>window.__xss=(window.__xss||[]).concat('${tag}-script')</script>`;
    const thread = (await api("/api/threads", { method: "POST", json: { title: evil("title") } })).body;
    const env = await api("/api/environments", { method: "POST", json: { name: `e-${Date.now().toString(36)}`, env: { NOTE: evil("env-var") } } });
    const bot = await api("/api/agents", { method: "POST", json: { name: evil("bot-name"), handle: `xss${Date.now().toString(36)}`, model: "openai/x", systemPrompt: evil("prompt") } });
    expect([env.status, bot.status]).toEqual([201, 201]);
    const { SignJWT } = await import("jose");
    const runToken = await new SignJWT({ kind: "stream", house: "house-ui", thread: thread.id, scope: "stream:write", run: "rx" })
      .setProtectedHeader({ alg: "HS256" }).setIssuer("threadbox").setSubject("ui-user").setIssuedAt().setExpirationTime("10m")
      .sign(new TextEncoder().encode("test-token-secret-0123456789abcdef"));
    for (const payload of [
      { type: "chat", text: evil("chat") },
      { type: "pi.tool_call", toolCallId: "x1", name: evil("tool-name"), args: { command: evil("args") } },
      { type: "pi.tool_result", toolCallId: "x1", output: evil("output"), isError: true },
      { type: "pi.error", message: evil("error") },
      { type: "signal.exec.output", execId: "x1", text: evil("exec") },
      { type: "artifact.files", runId: "rx", files: [{ path: evil("path"), status: "added", size: 1, content: evil("content") }] },
      { type: "artifact.diff", runId: "rx", status: "ok", diff: `+++ b/${evil("diff")}\n@@ -0,0 +1 @@\n+${evil("diff-line")}\n` },
    ]) {
      const r = await fetch(`${worker.url}/api/threads/${thread.id}/entries`, {
        method: "POST", headers: { authorization: `Bearer ${payload.type.startsWith("artifact.") ? runToken : token}`, "content-type": "application/json" }, body: JSON.stringify({ payload }),
      });
      expect([payload.type, r.status]).toEqual([payload.type, 201]);
    }
    const { context, page } = await signedInPage();
    for (const path of [`/threads/${thread.id}`, "/", "/environments", "/bots", "/sandboxes"]) {
      await page.goto(`${worker.url}${path}`);
      await page.waitForLoadState("networkidle");
      if (path.startsWith("/threads/")) {
        await page.waitForSelector("[data-kind=artifacts]");
        for (const d of await page.$$("details.tool")) await d.evaluate((el) => { (el as HTMLDetailsElement).open = true; });
        expect(await page.textContent("li.bubble .bubble-text")).toContain("<img src=x");
      }
      // An API error message that quotes what was sent: a refused bot handle.
      if (path === "/bots") {
        await page.fill("form.bot-form input[name=name]", evil("form"));
        await page.fill("form.bot-form input[name=model]", evil("model"));
        await page.fill("form.bot-form input[name=handle]", "ok-handle");
        await page.click("form.bot-form button[type=submit]");
        await page.waitForTimeout(500);
      }
      expect([path, await page.evaluate(() => (window as any).__xss ?? [])]).toEqual([path, []]);
      expect([path, await page.$$eval("img", (els) => els.length)]).toEqual([path, 0]);
    }
    await context.close();
    if (bot.status === 201) await api(`/api/agents/${bot.body.id}`, { method: "DELETE" });
    if (env.status === 201) await api(`/api/environments/${env.body.id}`, { method: "DELETE" });
  });
});

describe("keyboard and screen reader", () => {
  it("every field and picker has a name a screen reader can say (not only a placeholder)", async () => {
    const thread = (await api("/api/threads", { method: "POST", json: { title: "names" } })).body;
    const { context, page } = await signedInPage();
    const unnamed: string[] = [];
    for (const path of ["/", `/threads/${thread.id}`, "/environments", "/bots"]) {
      await page.goto(`${worker.url}${path}`);
      await page.waitForLoadState("networkidle");
      unnamed.push(...await page.$$eval("input:not([type=hidden]), select, textarea", (els, p) => els
        .filter((el) => !(el as HTMLInputElement).labels?.length && !el.getAttribute("aria-label") && !el.getAttribute("aria-labelledby") && !el.getAttribute("title"))
        .map((el) => `${p} ${el.tagName.toLowerCase()}[name=${el.getAttribute("name")}]`), path));
    }
    expect(unnamed).toEqual([]);
    await context.close();
  });
});

describe("a bot's command, watched live", () => {
  it("a real bot's run_command shows its output live on its one card, which turns done with the result", async () => {
    if ((await api("/api/agents")).status === 404) return;
    const env = (await api("/api/environments", {
      method: "POST",
      json: {
        name: "ui-bot-box", sharedBox: true, secrets: { SCRIPTED_MODEL_KEY: MODEL_SECRET },
        piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", models: [{ id: "scripted-model" }] } } },
      },
    })).body;
    const bot = (await api("/api/agents", { method: "POST", json: { name: "Runner", handle: "runner", model: "local/scripted-model", tools: ["run_command"], environmentId: env.id } })).body;
    const thread = (await api("/api/threads", { method: "POST", json: { title: "bot command", environmentId: env.id } })).body;
    // The command prints, then waits for the test to have seen that line on the page.
    const flag = `/tmp/ui-bot-live-${Date.now()}`;
    model.push(
      { toolCalls: [{ id: "rc1", name: "run_command", arguments: { command: `echo first-line; for i in $(seq 1 300); do [ -e ${flag} ] && break; sleep 0.1; done; echo second-line` } }] },
      { text: "The command printed two lines." },
    );
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@runner print two lines" } } });
    await page.waitForSelector("details.tool[data-tool=run_command].tool-running[open] pre.output.live >> text=first-line", { timeout: 60_000 });
    writeFileSync(flag, "");
    await page.waitForSelector("details.tool[data-tool=run_command].tool-done", { timeout: 60_000 });
    await page.waitForSelector(`li.bubble-bot >> text=The command printed two lines.`);
    // One card for the call: its arguments, live output and result, none split off as another command.
    expect(await page.$$eval("details.tool", (els) => els.map((el) => el.getAttribute("data-tool")))).toEqual(["run_command"]);
    expect(await page.textContent("details.tool[data-tool=run_command] pre.output")).toContain("second-line");
    const es = await entries(thread.id);
    expect(new Set(es.filter((e) => e.payload.type === "signal.exec.output").map((e) => e.authorId))).toEqual(new Set([bot.id]));
    await context.close();
  });
});

describe("a bot whose model fails", () => {
  it("a model that goes silent, or ends its answer early, is shown as the bot's failed turn with the reason in words", async () => {
    if ((await api("/api/agents")).status === 404) return;
    const env = (await api("/api/environments", {
      method: "POST",
      json: {
        name: "ui-idle-model", secrets: { SCRIPTED_MODEL_KEY: MODEL_SECRET },
        piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", idleTimeoutMs: 300, models: [{ id: "scripted-model" }] } } },
      },
    })).body;
    await api("/api/agents", { method: "POST", json: { name: "Sleepy", handle: "sleepy", model: "local/scripted-model", tools: [], environmentId: env.id } });
    const thread = (await api("/api/threads", { method: "POST", json: { title: "silent model", environmentId: env.id } })).body;
    const { context, page } = await signedInPage();
    await page.goto(`${worker.url}/threads/${thread.id}`);
    await page.waitForSelector(".link-state[data-link=live]");
    model.push({ hang: true }, { hang: true }, { hang: true });
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@sleepy are you there?" } } });
    const idle = await page.waitForSelector("li.mark-bad[data-kind='signal.dispatch.error']", { timeout: 60_000 });
    expect(await idle.textContent()).toMatch(/^ @sleepy's turn failed \(the model API sent nothing for 300 ms \(idle timeout\) \(after 3 attempts\)\) /);
    model.push({ text: "half an answer", endAfterChunks: 1 }, { text: "half an answer", endAfterChunks: 1 }, { text: "half an answer", endAfterChunks: 1 });
    await api(`/api/threads/${thread.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@sleepy try again" } } });
    const cut = await page.waitForSelector("li.mark-bad[data-kind='signal.dispatch.error'] >> nth=1", { timeout: 60_000 });
    expect(await cut.textContent()).toContain("the model API's answer ended before it was finished (no finish reason) (after 3 attempts)");
    await page.screenshot({ path: join(OUT_DIR, "bot-failed.png") });
    await context.close();
  });
});
