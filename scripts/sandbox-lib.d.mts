export type DevSandboxHost = { pid: number; apiUrl: string; apiKey: string };
export type SandboxTarget = { apiUrl: string; apiKey: string; target?: string; close(): Promise<void>; label: string };
export function loadSandboxModules(): Promise<Record<string, any>>;
export function refuseUnknownOptions(argv: string[], command: string, flags: string[], withValue?: string[]): void;
export function chooseTarget(o: { env: Record<string, string | undefined>; file: Record<string, string>; devHost: DevSandboxHost | null }): {
  apiUrl: string | undefined; apiKey: string | undefined; target: string | undefined; from: string;
};
export function resolveTarget(argv: string[]): Promise<SandboxTarget>;
