export const ROOT: string;
export const OFFLINE_WRANGLER_ENV: Record<string, string>;
export function nodePath(): string;
export function localTracingEnv(): Record<string, string>;
export function freePort(): Promise<number>;
export function waitForHttp(url: string, timeoutMs?: number, isReady?: (r: Response) => boolean): Promise<void>;
export interface StartedWorker {
  url: string;
  port: number;
  pid: number;
  vars: Record<string, string>;
  persistTo: string;
  output(): string;
  mintHouseToken(houseId?: string, subject?: string, role?: string): Promise<string>;
  /** Stops it and removes the state dir startWorker made for it, unless keepState (for a restart on `persistTo`). */
  stop(opts?: { keepState?: boolean }): Promise<void>;
}
export function startWorker(opts?: {
  port?: number; vars?: Record<string, string>; persistTo?: string; quiet?: boolean; logLevel?: string; configPath?: string; readyPath?: string;
  /** Project directory to run wrangler in (default: this checkout). */
  cwd?: string;
}): Promise<StartedWorker>;
