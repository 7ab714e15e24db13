import { SYSTEM_AUTHOR } from "../entries/schema";

/** Latin letters that other scripts draw alike (the ones that spell the reserved name, and a few more). */
const CONFUSABLES: Record<string, string> = {
  "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "х": "x", "у": "y", "һ": "h", "ԁ": "d", "ь": "b", "т": "t", "г": "r",
  "α": "a", "ε": "e", "ο": "o", "ρ": "p", "τ": "t", "χ": "x", "ν": "v", "β": "b",
};

/** What a name looks like: compatibility forms folded, marks, fillers and spacing dropped, look-alike letters mapped, lower case. */
function looksLike(name: string): string {
  return [...name.normalize("NFKD").toLowerCase()]
    .filter((ch) => !/[\p{M}\p{Z}\p{Cf}\u115f\u1160\u3164\uffa0\u2800\ufe00-\ufe0f]/u.test(ch))
    .map((ch) => CONFUSABLES[ch] ?? ch)
    .join("");
}

/**
 * Whether a name would pass, shown to a reader, for the control plane's own (`threadbox` in any
 * case, width, spacing or look-alike letters): no token subject, author or brain may take it.
 */
export function passesForControlPlane(name: string): boolean {
  return looksLike(name) === SYSTEM_AUTHOR;
}
