/**
 * The runner: the process started in a box for one run.
 *
 *   node runner.mjs --harness pi --prompt-file <f> [--mirror <mirror.mjs>] [--model m] [--provider p]
 *        [--system-prompt-file f] [--append-system-prompt-file f] [--tools a,b] [--session <file|id>]
 *        [--cwd dir] [--bin <harness binary>] [--no-finish] [-- extra harness args]
 *
 * It starts the harness, owns its exit code, enforces the runaway guard (THREADBOX_RUNAWAY_MS:
 * SIGTERM, then SIGKILL after THREADBOX_KILL_GRACE_MS) and the start window of a mirroring
 * harness (THREADBOX_START_TIMEOUT_MS: no output by then, stopped the same way), forwards SIGTERM/SIGINT/SIGHUP to the
 * harness, and on exit reads the thread back, runs decideOutcome and posts the finished-signal
 * unless one is already there. Harnesses that do not mirror themselves (claude-code, codex) have
 * their stdout parsed and posted by the runner. When the harness has ended, whatever it started is
 * killed (leftovers.ts). The runner posts the heartbeat for every harness,
 * except while a mirroring harness's mirror beats itself (so a frozen pi falls silent).
 * Exits with the harness's exit code (128 + signal number when it was killed).
 */
import { createHash, randomUUID } from "node:crypto";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { constants as osConstants, homedir } from "node:os";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import { parseArgs } from "node:util";
import { getCodingAgent } from "../sandbox/harness/index";
import { finishedSignalId } from "../sandbox/harness/pi";
import type { ThreadEntry } from "../sandbox/harness/types";
import { readBoxConfig } from "./config";
import { BOX_ENV, runnerPidPath } from "../domain/box-layout";
import { StderrTail, lastLine, secretValues } from "./stderr-tail";
import { TokenKeeper, renewUrlFor } from "./token-keeper";
import { handOverToken, removeStaleTokenFiles, takeStreamToken } from "./token-file";
import { postHeartbeat, readThread, sleep, StreamWriter, threadStreamUrl, type WireEntry } from "./stream-writer";
import { collectArtifacts, snapshotWorkspace, type WorkspaceStart } from "./artifacts";
import { namedSecretValues, redactDeep, redactionList, secretNamesOf, sensitiveFilePaths, sensitiveValues } from "./redact";
import { PiRpc } from "./pi-rpc";
import { MESSAGE_DELIVERED, RunCursor, steerAction } from "./steering";
import { ThreadWatch } from "./thread-watch";
import { parseJsonLine } from "../sandbox/harness/types";
import { artifactEntries, artifactStreamName, MAX_INLINE_DIFF_BYTES, writeDiffStream } from "./post-artifacts";
import { backoffDelayMs } from "../domain/backoff";
import { MAX_ENTRY_ID_LENGTH } from "../domain/entry-ids";
import { boundedReason } from "../domain/statuses";
import { HARNESS_MARK_ENV, killLeftovers, signalGroup } from "./leftovers";

/** How long a harness's output may stay open after it exited (a child it left behind holds it). */
const HARNESS_CLOSE_GRACE_MS = 2_000;
/** How long the runner waits for its thread watch's last read to end. */
const WATCH_STOP_GRACE_MS = 2_000;
const log = (m: string) => process.stderr.write(`[threadbox runner] ${new Date().toISOString()} ${m}\n`);

function randomId(): string {
  return randomUUID().replace(/-/g, "").slice(0, 16);
}

function splitLines(onLine: (line: string) => void) {
  let buf = "";
  // A pipe read can end inside a character's UTF-8 bytes: decoding each read alone would garble it.
  const decoder = new StringDecoder("utf8");
  return {
    push(chunk: Buffer | string) {
      buf += typeof chunk === "string" ? chunk : decoder.write(chunk);
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, "");
        buf = buf.slice(i + 1);
        if (line) onLine(line);
      }
    },
    end() {
      buf += decoder.end();
      if (buf.trim()) onLine(buf);
      buf = "";
    },
  };
}

export async function main(argv: string[] = process.argv.slice(2)): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      harness: { type: "string", default: "pi" },
      prompt: { type: "string" },
      "prompt-file": { type: "string" },
      mirror: { type: "string" },
      model: { type: "string" },
      provider: { type: "string" },
      "system-prompt-file": { type: "string" },
      "append-system-prompt-file": { type: "string" },
      tools: { type: "string" },
      "permission-mode": { type: "string" },
      session: { type: "string" },
      cwd: { type: "string" },
      bin: { type: "string" },
      // The synchronous host driver (src/sandbox/run.ts) decides and posts the finished-signal itself.
      "no-finish": { type: "boolean", default: false },
    },
  });

  // First, before anything can look: the launch's token file is read and removed.
  const tokenFile = process.env[BOX_ENV.streamTokenFile];
  const token = takeStreamToken(process.env);
  removeStaleTokenFiles(tokenFile);
  const cfgOrMissing = readBoxConfig(process.env, token);
  if ("missing" in cfgOrMissing) {
    log(`missing ${cfgOrMissing.missing.join(", ")}`);
    return 2;
  }
  const cfg = cfgOrMissing;
  const runId = cfg.runId ?? randomId();
  const agent = getCodingAgent(values.harness!);
  const prompt = values.prompt ?? (values["prompt-file"] ? readFileSync(values["prompt-file"], "utf8") : undefined);
  if (prompt === undefined) {
    log("no prompt: give --prompt or --prompt-file");
    return 2;
  }
  const readOpt = (f?: string) => (f ? readFileSync(f, "utf8") : undefined);
  // A harness that takes messages mid-run is driven interactively, so the thread can talk to it.
  const interactive = Boolean(agent.takesMessages) && cfg.steering;
  const startOptions = {
    interactive,
    prompt,
    model: values.model,
    provider: values.provider,
    systemPrompt: readOpt(values["system-prompt-file"]),
    appendSystemPrompt: readOpt(values["append-system-prompt-file"]),
    allowedTools: values.tools !== undefined ? values.tools.split(",").filter(Boolean) : undefined,
    permissionMode: values["permission-mode"],
    sessionFile: values.session,
    extensions: values.mirror ? [values.mirror] : [],
    extraArgs: positionals,
  };
  const cmd = agent.buildCommand(startOptions);
  const bin = values.bin ?? process.env.THREADBOX_HARNESS_BIN ?? cmd.argv[0];
  const url = threadStreamUrl(cfg.streamUrl, cfg.threadId);
  const tokens = new TokenKeeper(cfg.token, renewUrlFor(url), log);
  const stopTokenRefresh = tokens.keepFresh();
  const signalId = finishedSignalId(cfg.threadId, runId);

  const workDir = values.cwd ?? process.cwd();
  // What the harness must not get onto the thread through us: read before it can change anything.
  const sensitivePaths = sensitiveFilePaths(process.env);
  const redactions = redactionList([...namedSecretValues(process.env), ...sensitiveValues(workDir, sensitivePaths)]);
  /** Everything to scrub from the box's own words (stderr, artifacts): the token may have been renewed. */
  const secretsNow = () => secretValues(process.env, secretNamesOf(process.env), [cfg.token, tokens.current(), ...redactions]);

  // entries the runner itself posts for harnesses that do not mirror themselves
  const harnessWriter = agent.mirrorsItself
    ? undefined
    : new StreamWriter({ url, token: () => tokens.current(), producerId: `runner-h-${runId}-${randomId()}`, log });
  const local: ThreadEntry[] = []; // the runner's own view of the run, from the harness's stdout
  const parser = agent.createParser();
  let n = 0;
  const onEntries = (entries: ThreadEntry[]) => {
    for (const raw of entries) {
      // Redacted as it comes, the runner's own view too: the run's failure reason quotes it cut to
      // a bound, and a cut through a secret leaves a piece of it no redaction after could find.
      const e = redactDeep(raw, redactions);
      local.push(e);
      if (harnessWriter) {
        const w: WireEntry = { ...(e as WireEntry), id: `${cfg.threadId}:h:${runId}:${n++}`, ts: e.ts ?? Date.now() };
        if (cfg.authorId) w.authorId = cfg.authorId;
        harnessWriter.append(w);
      }
    }
  };
  let rpc: PiRpc | undefined;
  /** The harness's own session id (claude-code, codex), for resuming it with queued messages. */
  let sessionId: string | undefined;
  let refusal: string | undefined;
  const lines = splitLines((line) => {
    onEntries(parser.push(line));
    const record = rpc || agent.sessionIdOf ? parseJsonLine(line) : null;
    if (record && rpc) rpc.onRecord(record);
    if (record && agent.sessionIdOf) sessionId = agent.sessionIdOf(record) ?? sessionId;
  });

  // The control plane stops a run by SIGTERM to this pid (then the harness gets it from us).
  let stopNotes: ((ms: number) => Promise<void>) | undefined;
  const pidFile = runnerPidFile(cfg.threadId);
  try {
    mkdirSync(join(homedir(), ".threadbox"), { recursive: true });
    writeFileSync(pidFile, String(process.pid));
  } catch (err) {
    log(`could not write ${pidFile}: ${(err as Error).message}`);
  }

  const artifactsTimeoutMs = cfg.artifactsTimeoutMs;
  const workspaceStart: WorkspaceStart | null = artifactsTimeoutMs > 0 ? snapshotWorkspace(workDir) : null;

  log(`run ${runId}: starting ${agent.name} (${bin}) in ${workDir}`);
  const stderrTail = new StderrTail();
  let child!: ChildProcess;
  let exited = false;
  /** In the environment of the harness and of all it starts, so what it leaves can be found. */
  const harnessMark = randomId();
  /** The process groups of the harnesses started (each is its group's leader). */
  const groups: number[] = [];
  /** A harness that mirrors itself has written its first output (its extensions are loaded). */
  let harnessStarted = false;
  /** The harness's mirror took its token, so it beats from inside the harness from now on. */
  let mirrorBeats = false;
  const spawnHarness = (argv: string[], env: Record<string, string>) => {
    exited = false;
    // The mirror (in pi) posts too: it gets the token as a file it removes once read. A harness
    // that does not mirror itself gets no token at all.
    const handed = agent.mirrorsItself ? handOverToken(tokens.current()) : undefined;
    child = spawn(bin, argv.slice(1), {
      cwd: workDir,
      env: { ...process.env, ...env, THREADBOX_RUN_ID: runId, [HARNESS_MARK_ENV]: harnessMark, ...(handed ? { [BOX_ENV.streamTokenFile]: handed.path } : {}) },
      stdio: [interactive ? "pipe" : "ignore", "pipe", "pipe"],
      // Its own process group: a stop reaches the harness and what runs in its group with it.
      detached: true,
    });
    if (child.pid) groups.push(child.pid);
    child.stdout!.once("data", () => {
      harnessStarted = true;
    });
    mirrorBeats = false;
    // pi writes nothing to stdout before its extensions are loaded: a mirror that failed to load
    // must not leave the file for the tools that run next.
    if (handed) child.stdout!.once("data", () => {
      mirrorBeats = !existsSync(handed.path);
      handed.remove();
    });
    child.stdout!.on("data", (d) => lines.push(d));
    child.stderr!.on("data", (d) => {
      stderrTail.push(d);
      process.stderr.write(d);
    });
    return new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      child.on("error", (err) => {
        handed?.remove();
        log(`could not start the harness: ${err.message}`);
        resolve({ code: 127, signal: null });
      });
      let closed = false;
      child.on("close", (c, sig) => {
        closed = true;
        resolve({ code: c, signal: sig });
      });
      // A process the harness started can keep its output pipes open after the harness is gone;
      // the run is over when the harness is, not when the last holder of its stdout lets go.
      child.on("exit", (c, sig) => {
        handed?.remove();
        setTimeout(() => {
          if (closed) return;
          log(`${agent.name} exited (code=${c} signal=${sig}) but its output is still held open; going on without it`);
          child.stdout?.destroy();
          child.stderr?.destroy();
          resolve({ code: c, signal: sig });
        }, HARNESS_CLOSE_GRACE_MS).unref();
      });
    });
  };
  let waitHarness = spawnHarness(cmd.argv, cmd.env);
  const exitGraceMs = cfg.flushTimeoutMs + 5_000;
  let exitTimer: ReturnType<typeof setTimeout> | undefined;
  /** pi finished its work but hung on the way out and was terminated: its turn's outcome stands. */
  let exitForced = false;
  /** Set when the run ended because pi, interrupted, got no message in time. */
  let idleAfterInterruptMs: number | undefined;

  // Messages posted to the thread while the run goes on reach the harness; each one it took is marked.
  let watch: ThreadWatch | undefined;
  /** Messages for a harness that cannot take them mid-run: they start a resumed turn after this one. */
  const queued: { entryId: string; text: string }[] = [];
  /** The thread has ended this run: a message now is for whoever resumes it, not for this harness. */
  let ended = false;
  const notes = new StreamWriter({ url, token: () => tokens.current(), producerId: `runner-s-${runId}-${randomId()}`, log });
  const markDelivered = (entryId: string, mode: string) => notes.append({
    id: deliveredMarkId(cfg.threadId, runId, entryId), ts: Date.now(), ...(cfg.authorId ? { authorId: cfg.authorId } : {}),
    payload: { type: MESSAGE_DELIVERED, runId, entryId, mode },
  });
  if (cfg.steering) {
    if (interactive) {
      child.stdin!.on("error", (err) => log(`pi's stdin: ${err.message}`));
      rpc = new PiRpc(child.stdin!, {
        onDelivered: markDelivered,
        onRefused: (error) => {
          refusal = error;
          stderrTail.push(`${error}\n`);
        },
        log,
        onIdleAfterInterrupt: (ms) => {
          idleAfterInterruptMs = ms;
        },
        onInputClosed: () => {
          // pi's shutdown (the mirror's flush included) is bounded; past that it is stuck, not busy.
          exitTimer = setTimeout(() => {
            if (exited) return;
            log(`pi did not exit ${exitGraceMs} ms after its input closed; terminating it`);
            exitForced = true;
            terminate();
          }, exitGraceMs);
        },
      }, cfg.idleAfterInterruptMs);
      rpc.start(prompt);
    }
    const cursor = new RunCursor(runId);
    const seen = new Set<string>();
    const act = (e: WireEntry) => {
      const a = steerAction(e, runId);
      if (a.kind === "ended") ended = true;
      if (a.kind === "message" && ended) log(`message ${a.entryId} arrived after the thread ended the run; not delivered`);
      else if (a.kind === "message") {
        if (rpc) {
          if (!rpc.message(a.entryId, a.text)) log(`message ${a.entryId} arrived after the run ended; not delivered`);
        } else if (!seen.has(a.entryId)) {
          seen.add(a.entryId);
          queued.push({ entryId: a.entryId, text: a.text });
          log(`message ${a.entryId} queued: ${agent.name} takes it in a resumed turn after this one`);
        }
      }
      if (a.kind === "interrupt") {
        if (rpc) rpc.interrupt();
        else log(`${agent.name} cannot abort a turn and go on; interrupt ignored (stop ends the run)`);
      }
    };
    watch = new ThreadWatch({
      url, token: () => tokens.current(), log,
      onEntries: (es, live) => (live ? es : cursor.catchUp(es)).forEach(act),
      onCaughtUp: () => cursor.caughtUp(),
    });
    watch.start();
  }
  stopNotes = async (ms: number) => {
    await notes.flush(ms);
    notes.stop();
  };

  // The runner beats while the harness cannot: a mirroring harness's start can take long on a
  // loaded box and must not look like silence. Once its mirror is up the beat is the harness's own,
  // so a harness that hangs falls silent and the thread's silence alarm settles the run.
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  if (cfg.heartbeatMs > 0) {
    const beat = () => {
      if (!mirrorBeats) void postHeartbeat(url, tokens.current(), Math.min(cfg.heartbeatMs, 5_000));
    };
    beat();
    heartbeat = setInterval(beat, cfg.heartbeatMs);
  }

  let stopRequested = false;
  let runaway = false;
  let killTimer: ReturnType<typeof setTimeout> | undefined;
  const terminate = () => {
    if (exited) return;
    if (!signalGroup(child.pid, "SIGTERM")) child.kill("SIGTERM");
    if (!killTimer) {
      killTimer = setTimeout(() => {
        if (!exited) {
          log("harness ignored SIGTERM; SIGKILL");
          if (!signalGroup(child.pid, "SIGKILL")) child.kill("SIGKILL");
        }
      }, cfg.killGraceMs);
    }
  };
  const runawayTimer = setTimeout(() => {
    runaway = true;
    log(`runaway guard (${cfg.runawayMs} ms): stopping the harness`);
    terminate();
  }, Math.min(cfg.runawayMs, 2 ** 31 - 1));
  // A pi stuck before it loads its mirror would keep the runner's beat, and so the run, alive
  // until the runaway guard: with no output within the start window it is stopped instead.
  let startTimedOut = false;
  const startTimer = agent.mirrorsItself && cfg.startTimeoutMs > 0
    ? setTimeout(() => {
      if (harnessStarted || exited) return;
      startTimedOut = true;
      log(`${agent.name} wrote nothing within ${cfg.startTimeoutMs} ms of its start (THREADBOX_START_TIMEOUT_MS): stopping it`);
      terminate();
    }, Math.min(cfg.startTimeoutMs, 2 ** 31 - 1))
    : undefined;
  const onSignal = (sig: NodeJS.Signals) => {
    log(`${sig}: stopping the harness`);
    stopRequested = true;
    terminate();
  };
  for (const s of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(s, onSignal);

  let { code, signal } = await waitHarness;
  // A harness that cannot take messages mid-run gets what arrived as a resumed turn of its session.
  while (!rpc && queued.length > 0 && code === 0 && !stopRequested && !runaway && !ended && agent.sessionIdOf) {
    lines.end();
    if (!sessionId) {
      log(`${agent.name} reported no session id; ${queued.length} message(s) stay on the thread for a resume`);
      break;
    }
    const batch = queued.splice(0);
    for (const m of batch) markDelivered(m.entryId, "queued");
    log(`resuming ${agent.name} session ${sessionId} with ${batch.length} message(s) from the thread`);
    const next = agent.buildCommand({ ...startOptions, prompt: batch.map((m) => m.text).join("\n\n"), sessionFile: sessionId });
    ({ code, signal } = await spawnHarness(next.argv, next.env));
  }
  exited = true;
  // Nothing the harness started outlives the run: a shared box would keep it for ever.
  const left = killLeftovers(harnessMark, groups);
  if (left) log(`killed ${left} process(es) ${agent.name} left running`);
  if (watch && !(await watch.stop(WATCH_STOP_GRACE_MS))) log("the thread watch did not stop in time; going on");
  clearTimeout(runawayTimer);
  clearTimeout(startTimer);
  if (killTimer) clearTimeout(killTimer);
  if (exitTimer) clearTimeout(exitTimer);
  if (heartbeat) clearInterval(heartbeat);
  lines.end();
  onEntries(parser.end());
  log(`harness exited: code=${code} signal=${signal}`);

  const deadline = Date.now() + cfg.flushTimeoutMs;
  if (harnessWriter) await harnessWriter.flush(Math.max(0, deadline - Date.now()));
  await stopNotes?.(Math.max(0, deadline - Date.now()));

  if (workspaceStart) {
    await postArtifacts(workspaceStart, secretsNow(), sensitivePaths, { url, streamBase: cfg.streamUrl, threadId: cfg.threadId, runId, authorId: cfg.authorId, tokens, timeoutMs: artifactsTimeoutMs });
  }

  rmSync(pidFile, { force: true });
  // pi refused the task in RPC mode (it exits 0 once its stdin closes): that is a failed start.
  const exitedCleanly = code === 0 || exitForced;
  const effectiveCode = refusal !== undefined && exitedCleanly ? 1 : exitForced ? 0 : code;
  const exitCode = () => (effectiveCode !== null ? effectiveCode : 128 + ((signal ? (osConstants.signals as Record<string, number>)[signal] : 1) ?? 1));
  if (values["no-finish"]) {
    harnessWriter?.stop();
    stopTokenRefresh();
    return exitCode();
  }

  // read the thread back (bounded), then decide
  let thread: ThreadEntry[] | undefined;
  for (let attempt = 0; Date.now() < deadline; attempt++) {
    try {
      thread = (await readThread(url, tokens.current(), Math.max(1_000, Math.min(10_000, deadline - Date.now())))) as ThreadEntry[];
      break;
    } catch (err) {
      log(`reading the thread failed (${(err as Error).message}); retrying`);
      await sleep(backoffDelayMs(attempt + 1, 200, 2_000));
    }
  }
  if (!thread) log("could not read the thread; deciding from the harness output alone");
  // the thread decides whether a finished-signal is already there; the runner's local view
  // (appended last) covers entries that did not reach the thread
  const outcome = agent.decideOutcome([...(thread ?? []), ...local], effectiveCode, {
    signal,
    stopRequested,
    runaway,
    ...(startTimedOut ? { startTimeoutMs: cfg.startTimeoutMs } : {}),
    ...(idleAfterInterruptMs !== undefined ? { idleAfterInterruptMs } : {}),
    signalId,
    runId: cfg.runId,
    authorId: cfg.authorId,
  });
  log(`outcome: ${outcome.status} (${outcome.reason})${outcome.alreadyFinished ? " — already on the thread" : ""}`);
  const failureEntries: WireEntry[] = [];
  if (outcome.status !== "completed") {
    const tail = stderrTail.text(secretsNow());
    if (tail.text.trim()) {
      // The harness's own words on why it failed, which otherwise die with the box's log.
      failureEntries.push({
        id: `${cfg.threadId}:stderr:${runId}`, ts: Date.now(), ...(cfg.authorId ? { authorId: cfg.authorId } : {}),
        payload: { type: "signal.run.stderr", runId, text: tail.text, truncated: tail.truncated },
      } as WireEntry);
      const line = lastLine(tail.text);
      // A bare exit code says nothing: name the harness's last words in the reason the thread shows.
      for (const e of outcome.entries) {
        const p = e.payload as { reason?: unknown };
        if (line && typeof p.reason === "string" && /exited with code|killed by/.test(p.reason)) p.reason = `${p.reason}: ${line}`;
      }
    }
  }
  if (outcome.entries.length || failureEntries.length) {
    const writer = new StreamWriter({ url, token: () => tokens.current(), producerId: `runner-${runId}-${randomId()}`, log });
    // The reason may quote the harness's stderr line, added after the outcome was decided.
    writer.append(...failureEntries, ...outcome.entries.map((e) => withBoundedReason(redactDeep({ ...(e as WireEntry), ts: Date.now() }, redactions))));
    const ok = await writer.flush(Math.max(cfg.flushTimeoutMs, deadline - Date.now()));
    writer.stop();
    if (!ok) log("could not post the finished-signal in time");
  }
  harnessWriter?.stop();
  stopTokenRefresh();
  return exitCode();
}

/**
 * The entry with its reason cut back within the limit: the stderr line appended to it and the
 * redaction marks can lengthen a reason that was already near it, and the worker refuses a longer one.
 */
function withBoundedReason(e: WireEntry): WireEntry {
  const p = e.payload as { reason?: unknown };
  return typeof p.reason === "string" ? { ...e, payload: { ...e.payload, reason: boundedReason(p.reason) } } : e;
}

/**
 * The run's work, on the thread before its finished-signal (so it outlives the box). Bounded by
 * `timeoutMs`; a failure here is logged and never changes the run's outcome.
 */
async function postArtifacts(
  start: WorkspaceStart, secrets: string[], sensitive: string[],
  o: { url: string; streamBase: string; threadId: string; runId: string; authorId?: string; tokens: TokenKeeper; timeoutMs: number },
): Promise<void> {
  const deadline = Date.now() + o.timeoutMs;
  try {
    const artifacts = collectArtifacts(start, secrets, undefined, sensitive, deadline);
    let diffStream: string | undefined;
    if (artifacts.git && artifacts.git.diffBytes > MAX_INLINE_DIFF_BYTES) {
      const name = artifactStreamName(o.threadId, o.runId);
      if (await writeDiffStream(o.streamBase, name, o.tokens.current() ?? "", artifacts.git.diff, Math.max(1_000, deadline - Date.now()))) diffStream = name;
      else log("could not store the full diff in its stream; the thread keeps its head");
    }
    const writer = new StreamWriter({ url: o.url, token: () => o.tokens.current(), producerId: `runner-a-${o.runId}-${randomId()}`, log });
    writer.append(...artifactEntries(artifacts, { threadId: o.threadId, runId: o.runId, authorId: o.authorId, diffStream }));
    const ok = await writer.flush(Math.max(1_000, deadline - Date.now()));
    writer.stop();
    log(ok ? `artifacts: ${artifacts.files.length} file(s)${artifacts.git ? `, diff ${artifacts.git.diffBytes} bytes` : ""}` : "could not post the artifacts in time");
  } catch (err) {
    log(`collecting artifacts failed: ${(err as Error).message}`);
  }
}

/** Where the runner of a thread's current run records its pid, HOME-relative in the box. */
export function runnerPidFile(threadId: string): string {
  return join(homedir(), runnerPidPath(threadId));
}

const isMain = (() => {
  try {
    const entry = process.argv[1] ?? "";
    return /runner\.(m?js|ts)$/.test(entry);
  } catch {
    return false;
  }
})();

if (isMain) {
  main().then(
    (code) => process.exit(code),
    (err) => {
      log(`crashed: ${(err as Error)?.stack ?? err}`);
      process.exit(1);
    },
  );
}

/**
 * A delivery mark's id, the same for every retry of it. It names the message it marks; when that
 * would make it longer than an entry id may be (a client's long chat id), it names a digest of it
 * instead: the worker refuses an over-long id with the whole batch it came in.
 */
export function deliveredMarkId(threadId: string, runId: string, entryId: string): string {
  const plain = `${threadId}:delivered:${runId}:${entryId}`;
  if (plain.length <= MAX_ENTRY_ID_LENGTH) return plain;
  return `${threadId}:delivered:${createHash("sha256").update(`${runId}\u0000${entryId}`).digest("hex").slice(0, 40)}`;
}
