// Terminal output: colour only on a TTY (NO_COLOR / FORCE_COLOR respected), a spinner on stderr
// while waiting, and a prompt that does not echo what is typed (for secrets).
import { createInterface } from "node:readline";
import { Interrupted } from "./errors.mjs";

export function colourEnabled(stream = process.stdout, env = process.env) {
  if (env.NO_COLOR) return false;
  if (env.FORCE_COLOR && env.FORCE_COLOR !== "0") return true;
  return Boolean(stream.isTTY);
}

const CODES = { bold: [1, 22], dim: [2, 22], red: [31, 39], green: [32, 39], yellow: [33, 39], blue: [34, 39], magenta: [35, 39], cyan: [36, 39], gray: [90, 39] };

/** @returns {Record<keyof typeof CODES, (s: string) => string>} */
export function palette(enabled) {
  return Object.fromEntries(Object.entries(CODES).map(([name, [on, off]]) => [name, enabled ? (s) => `\x1b[${on}m${s}\x1b[${off}m` : (s) => String(s)]));
}

const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/**
 * A spinner on stderr, only when stderr is a TTY. Lines written through `print` clear it first,
 * so output and spinner never interleave.
 */
export function createSpinner(stream = process.stderr) {
  const active = Boolean(stream.isTTY) && !process.env.CI;
  let timer = null;
  let text = "";
  let frame = 0;
  const clear = () => { if (active) stream.write("\r\x1b[2K"); };
  const draw = () => { if (active && timer) stream.write(`\r\x1b[2K${FRAMES[frame++ % FRAMES.length]} ${text}`); };
  return {
    start(label) {
      text = label;
      if (!active || timer) return;
      timer = setInterval(draw, 80);
      timer.unref?.();
      draw();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
      clear();
    },
    /** Writes a line to `out` without tearing the spinner. */
    print(line, out = process.stdout) {
      if (timer) clear();
      out.write(line.endsWith("\n") ? line : `${line}\n`);
      if (timer) draw();
    },
  };
}

/** Runs `fn` with a spinner showing `label`. */
export async function withSpinner(label, fn) {
  const s = createSpinner();
  s.start(label);
  try {
    return await fn();
  } finally {
    s.stop();
  }
}

/**
 * Asks on the terminal without echoing the answer. Ctrl-C rejects with `Interrupted`; Ctrl-D on an
 * empty line answers "".
 */
export function promptHidden(question, input = process.stdin, output = process.stderr) {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input, output, terminal: true });
    let muted = false;
    let settled = false;
    const settle = (fn) => {
      if (settled) return;
      settled = true;
      muted = false;
      output.write("\n");
      rl.close();
      fn();
    };
    // readline echoes through _writeToOutput; after the question, echo nothing.
    rl._writeToOutput = (s) => { if (!muted) output.write(s); };
    // In raw mode Ctrl-C is a keystroke, not a signal: without this readline only pauses, and the
    // command waits on an answer that never comes.
    rl.on("SIGINT", () => settle(() => reject(new Interrupted())));
    rl.on("close", () => settle(() => resolve("")));
    rl.question(question, (answer) => settle(() => resolve(answer)));
    muted = true;
  });
}

/** All of stdin as text. */
export async function readStdin(input = process.stdin) {
  const chunks = [];
  for await (const c of input) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}
