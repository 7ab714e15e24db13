// Test output without the lines that only mean "this test meant to do that".
//
// workerd reports every fetch to a closed port as an uncaught exception (`disconnected:
// Connection refused`, then `Network connection lost.`), even when the caller handles the
// rejection (checked: `fetch(dead).then(ok, handle)` logs it too). Our fault tests do that on
// purpose (a sandbox host that is down). The Workers vitest integration writes workerd's logs
// straight to stdout/stderr of the vitest process with no filter hook, so vitest.config.ts
// filters those two streams. Only these whole log messages are dropped; anything else
// workerd says still prints.

const WORKERD_REFUSED = /^(exception = \S*: disconnected: Connection refused \(os error 111\)|uncaught exception; (source = Uncaught \(in promise\); stack = Error: Network connection lost\.|exception = \S*: disconnected: jsg\.Error: Network connection lost\.))(\nstack: [^\n]*)?\n?$/;

/** Whether one write is only workerd's report of a refused loopback connection. @param {unknown} chunk */
export function isExpectedWorkerdNoise(chunk) {
  return (typeof chunk === "string" || chunk instanceof Uint8Array) && WORKERD_REFUSED.test(String(chunk));
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
