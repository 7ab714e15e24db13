// A command's output as a terminal would draw it: its colours and cursor moves are codes for the
// terminal, not text for the reader (`git`, `npm`, `pytest`, `ls --color` write them).

// Escape sequences (ECMA-48): CSI (ESC [ or the one-byte 0x9b, parameters, a final byte), OSC
// (ESC ], up to BEL or ESC \, e.g. a window title or a hyperlink's target), and the other
// two-or-more-byte ones (ESC ( B, ESC 7, ESC M, …).
const ESCAPES = /(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]/g;
// The control characters a terminal draws nothing for (tab, newline and carriage return are kept).
const CONTROLS = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g;

/** A line with carriage returns: each part is drawn over the line from its start, so a progress bar shows its last state. */
function overwrite(line: string): string {
  if (!line.includes("\r")) return line;
  let shown = "";
  for (const part of line.split("\r")) shown = part + shown.slice(part.length);
  return shown;
}

/** Text without the terminal's escape sequences and control characters, carriage returns applied. */
export function terminalText(text: string): string {
  if (!/[\x00-\x08\x0b-\x1f\x7f\x9b]/.test(text)) return text;
  return text.replace(ESCAPES, "").replace(CONTROLS, "").split("\n").map(overwrite).join("\n");
}
