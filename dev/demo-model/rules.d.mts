export type DemoToolCall = { name: string; arguments: Record<string, unknown> };
export type DemoReply = { text?: string; toolCalls?: DemoToolCall[] } | { error: number; message: string };
export type DemoRequest =
  | { kind: "write"; path: string; content: string }
  | { kind: "run"; command: string }
  | { kind: "list"; path: string }
  | { kind: "read"; path: string }
  | { kind: "delegate"; task: string }
  | { kind: "fail"; reason: string }
  | { kind: "help"; text: string };
export const DEMO_MODEL_ID: string;
export const HELP_TEXT: string;
export function messageText(message: unknown): string;
export function offeredTools(body: unknown): Set<string>;
export function parseRequest(text: string): DemoRequest;
export function toolCallFor(request: DemoRequest, tools: Set<string>, body: unknown): DemoToolCall | null;
export function gateAnswer(messages: unknown[]): "YES" | "NO" | null;
export function decideReply(body: unknown): DemoReply;
