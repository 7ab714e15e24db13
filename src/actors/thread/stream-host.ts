import type { NewMessage, StoredMessage, StreamLog, StreamMeta } from "../../streams/log";
import type { EntryWriter } from "../../threads/entries";
import { bodyToMessages, handleStreamHttp, type ForkHost, type StreamHost } from "../../streams/stream-http";
import type { WaitHub } from "../../streams/wait-hub";

/** What is decided per request: which stream this is, what the protocol may do to it, who writes. */
export type StreamRequestOptions = {
  streamName: string;
  allowCreate: boolean;
  allowDelete: boolean;
  /** A thread's log must stay open: the control plane still has to write its finished-signal. */
  allowClose: boolean;
  canWrite: boolean;
  writer: EntryWriter;
  /** Plain streams only: how this request may fork (threads are not forkable). */
  fork?: ForkHost;
  /** When the client's token expires: a live read (SSE) ends there. */
  readableUntilMs?: number;
};

/** How a stream's owner turns an append body into messages and reacts to what was appended. */
export type AppendPolicy = {
  prepareAppend(body: Uint8Array, meta: StreamMeta, writer: EntryWriter): NewMessage[] | null;
  /** `writer`: the request's, as prepareAppend got it. */
  afterAppend(appended: StoredMessage[], writer: EntryWriter): void;
};

export type StreamStore = { log: StreamLog; hub: WaitHub; longPollTimeoutMs: number };

/** A plain stream's messages are the body as the protocol defines it; nothing reacts to them. */
export const plainStreamPolicy: AppendPolicy = {
  prepareAppend: (body, meta) => bodyToMessages(body, meta.contentType, false),
  afterAppend: () => {},
};

type StreamAuth = { canWrite: boolean; tokenExpiresAtMs?: number } & EntryWriter;

/** What the worker sent minus what is not about writing: every writer field passes on, a new one included. */
const writerOf = ({ canWrite: _canWrite, houseId: _houseId, tokenExpiresAtMs: _until, ...writer }: StreamAuth & { houseId?: string }): EntryWriter => writer;

export const threadStreamOptions = (threadId: string, auth: StreamAuth): StreamRequestOptions => ({
  streamName: `thread-${threadId}`, allowCreate: false, allowDelete: false, allowClose: false,
  canWrite: auth.canWrite, writer: writerOf(auth), readableUntilMs: auth.tokenExpiresAtMs,
});

export const plainStreamOptions = (name: string, auth: StreamAuth, fork: ForkHost): StreamRequestOptions => ({
  streamName: name, allowCreate: true, allowDelete: true, allowClose: true, fork,
  canWrite: auth.canWrite, writer: writerOf(auth), readableUntilMs: auth.tokenExpiresAtMs,
});

/** Serves one Durable Streams request; the host is built for this request only, never shared. */
export function serveStream(request: Request, store: StreamStore, policy: AppendPolicy, options: StreamRequestOptions): Promise<Response> {
  const host: StreamHost = {
    log: store.log,
    hub: store.hub,
    longPollTimeoutMs: store.longPollTimeoutMs,
    streamName: options.streamName,
    allowCreate: options.allowCreate,
    allowDelete: options.allowDelete,
    allowClose: options.allowClose,
    prepareAppend: (body, meta, writer) => policy.prepareAppend(body, meta, writer),
    afterAppend: (appended) => policy.afterAppend(appended, options.writer),
    fork: options.fork,
    readableUntilMs: options.readableUntilMs,
  };
  return handleStreamHttp(request, host, { canWrite: options.canWrite, ...options.writer });
}
