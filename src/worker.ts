import { DurableObject } from "cloudflare:workers";
export class ThreadActor extends DurableObject { async ping() { this.ctx.storage.sql.exec("create table if not exists t(x)"); return "pong"; } }
export class SandboxActor extends DurableObject {}
export class HouseActor extends DurableObject {}
export default { async fetch(req: Request, env: any) { const s = env.THREADS.get(env.THREADS.idFromName("a")); return new Response(await s.ping()); } };
