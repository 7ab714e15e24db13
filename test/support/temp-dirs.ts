// Temp dirs a test file makes for itself: each run of the suite made thousands, and kept them all.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";

/**
 * Call once at the top of a test file: returns mkdtemp in the OS temp dir, and every dir it made
 * is removed after the file's tests, passed or failed.
 */
export function tempDirs(): (prefix: string) => string {
  const made: string[] = [];
  afterAll(() => {
    for (const d of made) rmSync(d, { recursive: true, force: true, maxRetries: 3 });
  });
  return (prefix) => {
    const d = mkdtempSync(join(tmpdir(), prefix));
    made.push(d);
    return d;
  };
}
