// `@handle` completion in the composer (pure).

/** The partial handle being typed right before the caret, or null when not in a mention. */
export function mentionQuery(text: string, caret: number): string | null {
  const m = /(^|[\s(])@([a-z0-9_-]*)$/i.exec(text.slice(0, caret));
  return m ? m[2].toLowerCase() : null;
}

/** Replaces the partial mention before the caret with `@handle ` and returns the new text and caret. */
export function insertMention(text: string, caret: number, handle: string): { text: string; caret: number } {
  const before = text.slice(0, caret).replace(/@([a-z0-9_-]*)$/i, `@${handle} `);
  return { text: before + text.slice(caret).replace(/^\s+/, ""), caret: before.length };
}
