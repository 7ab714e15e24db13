// Diffs as diffs: unified diff text from a tool's output, and the file changes that pi's
// write/edit tool calls describe in their arguments.

export type DiffLine = { kind: "add" | "del" | "hunk" | "file" | "ctx"; text: string };

/** Whether a text reads as a unified diff (a hunk header, or both file headers). */
export function looksLikeDiff(text: string): boolean {
  return /^@@ -\d+(,\d+)? \+\d+(,\d+)? @@/m.test(text) || (/^--- \S/m.test(text) && /^\+\+\+ \S/m.test(text));
}

export function parseUnifiedDiff(text: string): DiffLine[] {
  return text.replace(/\n$/, "").split("\n").map((line): DiffLine => {
    if (/^(diff |index |--- |\+\+\+ )/.test(line)) return { kind: "file", text: line };
    if (line.startsWith("@@")) return { kind: "hunk", text: line };
    if (line.startsWith("+")) return { kind: "add", text: line };
    if (line.startsWith("-")) return { kind: "del", text: line };
    return { kind: "ctx", text: line };
  });
}

const lines = (s: string) => s.replace(/\n$/, "").split("\n");

/** The change a write/edit tool call makes, as diff lines; null for other tools. */
export function diffOfToolCall(name: string, args: unknown): DiffLine[] | null {
  const a = (args ?? {}) as Record<string, unknown>;
  const path = typeof a.path === "string" ? a.path : typeof a.file_path === "string" ? a.file_path : null;
  if (!path) return null;
  if (/^write$/i.test(name) && typeof a.content === "string") {
    return [{ kind: "file", text: `+++ ${path}` }, ...lines(a.content).map((t): DiffLine => ({ kind: "add", text: `+${t}` }))];
  }
  if (/^edit$/i.test(name)) {
    const edits = Array.isArray(a.edits) ? a.edits : [a];
    const out: DiffLine[] = [{ kind: "file", text: `--- ${path}` }, { kind: "file", text: `+++ ${path}` }];
    for (const e of edits as Record<string, unknown>[]) {
      if (!e || typeof e !== "object") return null;
      const oldText = e.oldText ?? e.old_string;
      const newText = e.newText ?? e.new_string;
      if (typeof oldText !== "string" || typeof newText !== "string") return null;
      out.push({ kind: "hunk", text: "@@" });
      out.push(...lines(oldText).map((t): DiffLine => ({ kind: "del", text: `-${t}` })));
      out.push(...lines(newText).map((t): DiffLine => ({ kind: "add", text: `+${t}` })));
    }
    return out;
  }
  return null;
}
