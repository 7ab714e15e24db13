/** A minimal ustar writer for tests: regular files only, enough to build folder uploads. */
export function tarArchive(files: Record<string, string | Uint8Array>): Uint8Array {
  const enc = new TextEncoder();
  const blocks: Uint8Array[] = [];
  for (const [name, content] of Object.entries(files)) {
    const data = typeof content === "string" ? enc.encode(content) : content;
    const header = new Uint8Array(512);
    const put = (at: number, text: string) => header.set(enc.encode(text), at);
    put(0, name);
    put(100, "0000644\0");
    put(108, "0000000\0");
    put(116, "0000000\0");
    put(124, data.byteLength.toString(8).padStart(11, "0") + "\0");
    put(136, "00000000000\0");
    put(148, "        ");
    put(156, "0");
    put(257, "ustar\0");
    put(263, "00");
    const sum = header.reduce((n, b) => n + b, 0);
    put(148, sum.toString(8).padStart(6, "0") + "\0 ");
    blocks.push(header);
    const body = new Uint8Array(Math.ceil(data.byteLength / 512) * 512);
    body.set(data);
    blocks.push(body);
  }
  blocks.push(new Uint8Array(1024));
  const out = new Uint8Array(blocks.reduce((n, b) => n + b.byteLength, 0));
  let at = 0;
  for (const b of blocks) {
    out.set(b, at);
    at += b.byteLength;
  }
  return out;
}
