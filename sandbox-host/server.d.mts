export interface SandboxHostOptions {
  /** 0 = any free port. */
  port?: number;
  /** Bearer key clients must send (DAYTONA_API_KEY on the client side). */
  apiKey: string;
  /** Directory for boxes; a fresh temp dir (removed on close) when omitted. */
  root?: string;
  host?: string;
  /** Base of the preview URLs it hands out (default: its own URL); set when reached through a proxy. */
  publicUrl?: string;
  log?: (line: string) => void;
  /** Largest request body it reads (an upload, say); a bigger one is a 413. Default 512 MiB. */
  maxBodyBytes?: number;
}
export interface SandboxHost {
  /** e.g. http://127.0.0.1:3986 */
  url: string;
  /** Daytona API base, e.g. http://127.0.0.1:3986/api */
  apiUrl: string;
  port: number;
  root: string;
  boxes: Map<string, { id: string; dir: string; home: string; marker: string; state: string }>;
  close(): Promise<void>;
}
export function startSandboxHost(opts: SandboxHostOptions): Promise<SandboxHost>;
