// Ceiling bench: the raw DO SQLite insert rate inside one actor, no HTTP per row.
// GET /insert?n=N&ids=0|1 inserts N rows (~100-byte blobs) in a loop inside one request, into a
// table shaped like src/streams/log.ts `messages` (same unique partial index on entry_id).
// Timing is done by the client (n rows minus an n=0 request): inside workerd, Date.now() does not
// advance during synchronous work.
import { DurableObject } from "cloudflare:workers";

interface Env {
  INSERT_BENCH: DurableObjectNamespace<InsertBench>;
}

export class InsertBench extends DurableObject<Env> {
  private seq = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    sql.exec(`create table if not exists messages (seq integer primary key, data blob not null, entry_id text, ts integer not null)`);
    sql.exec(`create unique index if not exists messages_entry_id on messages(entry_id) where entry_id is not null`);
    const row = sql.exec(`select coalesce(max(seq), 0) as m from messages`).toArray()[0];
    this.seq = Number(row?.m ?? 0);
  }

  insert(n: number, withIds: boolean): { rows: number; tail: number } {
    const sql = this.ctx.storage.sql;
    const data = new TextEncoder().encode(JSON.stringify({ k: "bench", pad: "x".repeat(80) }));
    const ts = Date.now();
    for (let i = 0; i < n; i++) {
      this.seq += 1;
      sql.exec(`insert into messages (seq, data, entry_id, ts) values (?, ?, ?, ?)`, this.seq, data, withIds ? crypto.randomUUID() : null, ts);
    }
    return { rows: n, tail: this.seq };
  }

  /** Long-polls parked on this actor: each gets the next broadcast's text. */
  private parked: ((text: string) => void)[] = [];
  private lastText = "";

  /** GET /ws: a hibernatable WebSocket on this actor, as a thread's subscribers are. GET /poll?after=N: a long-poll. */
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/poll") {
      const after = Number(url.searchParams.get("after") ?? "0");
      const text = after < this.seq ? this.lastText : await new Promise<string>((resolve) => this.parked.push(resolve));
      return new Response(text, { headers: { "next-offset": String(this.seq) } });
    }
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  /** POST /broadcast: one row committed, then the same text to every socket (a thread append with subscribers, bare). */
  broadcast(text: string): { sockets: number } {
    this.seq += 1;
    this.ctx.storage.sql.exec(`insert into messages (seq, data, entry_id, ts) values (?, ?, null, ?)`, this.seq, new TextEncoder().encode(text), Date.now());
    this.lastText = text;
    const sockets = this.ctx.getWebSockets();
    for (const ws of sockets) ws.send(text);
    const parked = this.parked;
    this.parked = [];
    for (const wake of parked) wake(text);
    return { sockets: sockets.length };
  }
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/health") return Response.json({ ok: true });
    if (url.pathname === "/insert") {
      const n = Math.max(0, Math.min(1_000_000, Number(url.searchParams.get("n") ?? "0") || 0));
      const withIds = url.searchParams.get("ids") === "1";
      const name = url.searchParams.get("actor") ?? "bench";
      const stub = env.INSERT_BENCH.get(env.INSERT_BENCH.idFromName(name));
      return Response.json(await stub.insert(n, withIds));
    }
    if (url.pathname === "/ws" || url.pathname === "/poll" || url.pathname === "/broadcast") {
      const stub = env.INSERT_BENCH.get(env.INSERT_BENCH.idFromName(url.searchParams.get("actor") ?? "ws"));
      if (url.pathname !== "/broadcast") return stub.fetch(request);
      return Response.json(await stub.broadcast(await request.text()));
    }
    return new Response("not found", { status: 404 });
  },
} satisfies ExportedHandler<Env>;
