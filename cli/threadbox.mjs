#!/usr/bin/env node
// threadbox: the command-line client of a threadbox server. Plain JavaScript on purpose: it runs
// as shipped on Node 20 and 22, with no build step between `npm ci` and `npx threadbox`.
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { registerArtifacts } from "./commands/artifacts.mjs";
import { registerChat } from "./commands/chat.mjs";
import { registerHouse } from "./commands/house.mjs";
import { registerSession } from "./commands/session.mjs";
import { registerThreads } from "./commands/threads.mjs";
import { createContext } from "./lib/context.mjs";
import { CliError, EXIT, Interrupted } from "./lib/errors.mjs";
import { printable, printableLine } from "./lib/render.mjs";
import { colourEnabled, palette } from "./lib/term.mjs";

let exitCode = EXIT.ok;
const setExit = (code) => { exitCode = code; };

const jsonOutput = process.argv.includes("--json");

// A reader that stops early (`threadbox tail --json | head -3`) closes the pipe: that is the end of
// the output, not a crash. It exits with the code set so far: a command waiting for an outcome (a
// run, a bot's answers) sets "interrupted" until it knows, so output cut short never reads as success.
// Any other failure to write (a full disk) is an error, said in one line.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err) => {
    if (err?.code === "EPIPE") process.exit(exitCode);
    if (stream === process.stdout) report(new CliError("output", `cannot write to stdout: ${err?.code ?? err?.message ?? err}`));
    process.exit(EXIT.error);
  });
}

const program = new Command("threadbox")
  .description("client of a threadbox server: threads, runs, boxes, environments, bots")
  .option("--url <url>", "server URL (default: $THREADBOX_URL, then what `threadbox login` stored)")
  .option("--json", "machine-readable output: one JSON document (NDJSON for tail/chat)")
  .version(JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version)
  // With --json a usage mistake is an error document like any other, without the help text.
  .showHelpAfterError(!jsonOutput)
  .configureOutput(jsonOutput ? {
    outputError: (str, write) => write(`${JSON.stringify({ error: { code: "usage", message: str.replace(/^error: /, "").trim() } })}\n`),
  } : {})
  .exitOverride();

const contexts = new WeakMap();
/** The context of the running command, made once from the global options. */
const ctxOf = (cmd) => {
  if (!contexts.has(cmd)) contexts.set(cmd, createContext(cmd.optsWithGlobals()));
  return contexts.get(cmd);
};

registerSession(program, ctxOf);
registerThreads(program, ctxOf, setExit);
registerHouse(program, ctxOf);
registerChat(program, ctxOf, setExit);
registerArtifacts(program, ctxOf);

function report(err) {
  const json = jsonOutput;
  if (err instanceof CommanderError) {
    // help and version are not failures; usage mistakes were already printed by commander
    return err.exitCode === 0 ? EXIT.ok : EXIT.error;
  }
  // Ctrl-C at a prompt is the user's own doing: exit as interrupted, with no message for people.
  if (err instanceof Interrupted && !json) return EXIT.interrupted;
  const code = err instanceof CliError ? err.code : "internal";
  const message = err instanceof CliError ? err.message : String(err?.stack ?? err);
  if (json) {
    process.stderr.write(`${JSON.stringify({ error: { code, message, ...(err?.details !== undefined ? { details: err.details } : {}) } })}\n`);
    if (err instanceof Interrupted) return EXIT.interrupted;
  } else {
    // Messages and details come from the server: escaped like everything else it sends.
    const c = palette(colourEnabled(process.stderr));
    process.stderr.write(`${c.red("error")} ${c.bold(printableLine(code))}: ${printable(message)}\n`);
    if (err?.details !== undefined) process.stderr.write(c.gray(`${printable(JSON.stringify(err.details, null, 2))}\n`));
  }
  return EXIT.error;
}

try {
  await program.parseAsync(process.argv);
} catch (err) {
  exitCode = report(err);
}
// Open sockets or a paused stdin must not keep a finished command alive.
process.exitCode = exitCode;
setImmediate(() => process.exit(exitCode));
