export interface DemoModel {
  /** e.g. http://127.0.0.1:3987/v1 */
  baseUrl: string;
  port: number;
  close(): Promise<void>;
}
export function startDemoModel(opts?: { port?: number; host?: string }): Promise<DemoModel>;
