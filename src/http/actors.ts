export { threadStub, plainStreamStub, plainStreamKey, houseStub, sandboxStub } from "../actors/stubs";

export function newId(prefix: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
