// Test output without the lines that only mean "this test meant to do that".
//
// workerd reports every fetch to a closed port as an uncaught exception (`disconnected:
// Connection refused`, then `Network connection lost.`), even when the caller handles the
// rejection (checked: `fetch(dead).then(ok, handle)` logs it too). Our fault tests do that on
// purpose (a sandbox host that is down). The Workers vitest integration writes workerd's logs
// straight to stdout/stderr of the vitest process with no filter hook, so vitest.config.ts
// filters those two streams. Only these whole log messages are dropped; anything else
// workerd says still prints.
//
// Likewise workerd reports every actor RPC method that rejects as an uncaught exception, with its
// stack, although its caller handles the rejection. The test worker's fault hooks (an index or a
// box actor made unavailable) throw on purpose, with a short message ending in ` (test)`: that
// report, message and stack frames and nothing else, is dropped too. Any other error still prints,
// and so does one that only wraps a hook's message in its own.

const WORKERD_REFUSED = /^(exception = \S*: disconnected: Connection refused \(os error 111\)|uncaught exception; (source = Uncaught \(in promise\); stack = Error: Network connection lost\.|exception = \S*: disconnected: jsg\.Error: Network connection lost\.))(\nstack: [^\n]*)?\n?$/;
const TEST_HOOK_FAILURE = /^uncaught exception; source = Uncaught \(in promise\); stack = Error: [a-z][a-z_ -]* \(test\)(\n {4}at [^\n]+)*\n?$/;

/** Whether one write is only workerd's report of a refused loopback connection or of a test hook's failure. @param {unknown} chunk */
export function isExpectedWorkerdNoise(chunk) {
  if (typeof chunk !== "string" && !(chunk instanceof Uint8Array)) return false;
  const text = String(chunk);
  return WORKERD_REFUSED.test(text) || TEST_HOOK_FAILURE.test(text);
}

/** @param {NodeJS.WriteStream} stream */
function filter(stream) {
  const write = stream.write.bind(stream);
  stream.write = (chunk, ...rest) => {
    if (isExpectedWorkerdNoise(chunk)) {
      rest.find((r) => typeof r === "function")?.(); // the write "completed"
      return true;
    }
    return write(chunk, ...rest);
  };
}

let installed = false;
export default function quietExpectedWorkerdNoise() {
  if (installed) return;
  installed = true;
  filter(process.stdout);
  filter(process.stderr);
}
