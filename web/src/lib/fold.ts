// Long messages are shown folded: their beginning, and a button for the rest.

/** Past this many characters, or lines, a message shows its beginning and a button for the rest. */
export const CHAT_PREVIEW_CHARS = 4000;
export const CHAT_PREVIEW_LINES = 40;

/** The beginning of a long message, or null when it is short enough to show whole. */
export function chatPreview(text: string): string | null {
  let end = Math.min(text.length, CHAT_PREVIEW_CHARS);
  let lines = 0;
  for (let i = 0; i < end; i++) {
    if (text.charCodeAt(i) === 10 && ++lines === CHAT_PREVIEW_LINES) {
      end = i;
      break;
    }
  }
  return end < text.length ? text.slice(0, end) : null;
}
