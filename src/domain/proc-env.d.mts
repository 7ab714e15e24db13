export function pidsWithEnv(name: string, matches: (value: string) => boolean): number[];
