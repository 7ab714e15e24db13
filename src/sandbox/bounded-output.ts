import { shq } from "../domain/shell";

// A command's output cut down inside the box, before anything carries it out: the provider's
// answer (the toolbox holds a one-shot command's output whole) and the worker that reads it (128 MB)
// would otherwise hold a command that prints gigabytes. No SDK or toolbox call offers a limit.

/**
 * What each of a command's stdout and stderr keeps of a long output: its first and its last this
 * many bytes, so an answer holds at most 1 MiB. Both ends, because a command's start says what it
 * set out to do and its end how it finished (the summary, the error that stopped it).
 */
export const OUTPUT_KEEP_BYTES = 256 * 1024;

/** Seconds the filters may take to finish once the command has exited. */
const CLOSE_GRACE_S = 2;

/**
 * `command` run with each of its output streams passed through a filter that keeps the stream's
 * first and last `keep` bytes; the bytes between are dropped, and in their place the filter writes
 * one line naming `nonce` and how many it dropped. Only a stream longer than 2 × `keep` is cut,
 * so a shorter output comes back byte for byte. The exit code is the command's. What a process
 * the command left running writes after it exited may come after the answer, or not at all.
 * Needs bash and coreutils (`head -c` reading no further than it keeps, as GNU's does; `stdbuf`
 * so the head streams as it comes), `mktemp`, `mkfifo`. Where the filters cannot be set up (no
 * writable temp dir) the output passes whole.
 */
export function boundedCommand(command: string, nonce: string, keep = OUTPUT_KEEP_BYTES): string {
  const k = Math.max(1, Math.floor(keep));
  const cut = [
    "__tb_cut() {",
    "  local d n",
    '  if ! d=$(mktemp -d 2>/dev/null) || ! mkfifo "$d/p" 2>/dev/null; then cat; [ -n "$d" ] && rm -rf "$d"; return 0; fi',
    '  wc -c <"$d/p" >"$d/n" &',
    // head's stdout is a pipe, which stdio buffers: a short line would wait for the head's end,
    // and the caller following the output live would see nothing while the command runs.
    `  if command -v stdbuf >/dev/null 2>&1; then stdbuf -o0 head -c ${k}; else head -c ${k}; fi`,
    `  tee "$d/p" | tail -c ${k} >"$d/t"`,
    '  wait "$!"',
    '  n=$(cat "$d/n" 2>/dev/null)',
    `  if [ "\${n:-0}" -gt ${k} ]; then printf '\\n[%s %s]\\n' '${nonce}' "$((n - ${k}))"; fi`,
    '  cat "$d/t"',
    '  rm -rf "$d"',
    "}",
  ].join("\n");
  // stdout and stderr each through a filter of its own, so a caller that streams them gets them
  // apart. The command ends when it exits, not when the last holder of its output lets go (a
  // server it started in the background): the filters get `CLOSE_GRACE_S` to finish, then they
  // are left to drain whatever that holder writes, as the box's own output would have taken it.
  const body = [
    `if ! o=$(mktemp -d 2>/dev/null) || ! mkfifo "$o/1" "$o/2" 2>/dev/null; then [ -n "$o" ] && rm -rf "$o"; exec bash -c ${shq(command)}; fi`,
    '__tb_cut <"$o/1" & f1=$!',
    '__tb_cut <"$o/2" >&2 & f2=$!',
    `bash -c ${shq(command)} >"$o/1" 2>"$o/2"`,
    "rc=$?",
    `for ((i = 0; i < ${CLOSE_GRACE_S * 20}; i++)); do { kill -0 "$f1" || kill -0 "$f2"; } 2>/dev/null || break; sleep 0.05; done`,
    'rm -rf "$o"',
    'exit "$rc"',
  ].join("\n");
  return `${cut}\n${body}\n`;
}

/**
 * A fresh marker for one command's cuts: no output has it by chance (a log of an earlier answer,
 * a file that quotes one). A command out to fake a cut can find it (it runs as the filters' user,
 * and the marker is on their command line); what it fakes is then only its own answer's account
 * of its own output.
 */
export function cutNonce(): string {
  return `tb-cut-${crypto.randomUUID().replace(/-/g, "")}`;
}

/** The line `readBoundedOutput` puts where the box cut bytes out of an output. */
export const CUT_LINE = /\n…\[cut by threadbox: \d+ bytes\]…\n/;

/**
 * The output of a `boundedCommand` with its cut markers made readable, and how many bytes the
 * cuts dropped (undefined when nothing was cut).
 */
export function readBoundedOutput(output: string, nonce: string): { output: string; omittedBytes?: number } {
  let omitted = 0;
  let cuts = 0;
  const marker = new RegExp(`\\n\\[${nonce} (\\d+)\\]\\n`, "g");
  const text = output.replace(marker, (_m, n: string) => {
    cuts++;
    omitted += Number(n);
    return `\n…[cut by threadbox: ${n} bytes]…\n`;
  });
  return cuts ? { output: text, omittedBytes: omitted } : { output };
}
