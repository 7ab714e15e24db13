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
    return new Response("not found", { status: 404 });
  },
} satisfies ExportedHandler<Env>;
