/** Quotes one word for a POSIX shell: the box runs every command through `sh -c`. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
