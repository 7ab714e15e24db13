/** Longest entry id the thread accepts (a longer one is refused with its whole POST). */
export const MAX_ENTRY_ID_LENGTH = 200;
