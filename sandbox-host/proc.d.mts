export const BOX_MARKER_VAR: string;
export function findMarkedPids(marker: string): number[];
export function killGroup(pid: number, signal: NodeJS.Signals): void;
export function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number;
