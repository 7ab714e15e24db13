import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";

export class SandboxActor extends DurableObject<Env> {}
