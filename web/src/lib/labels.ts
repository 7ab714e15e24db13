import type { Environment } from "./api";

/** An environment as a picker shows it: its name, and its id too when another has the same name. */
export function environmentLabel(env: Pick<Environment, "id" | "name">, all: readonly Pick<Environment, "id" | "name">[]): string {
  return all.some((other) => other.id !== env.id && other.name === env.name) ? `${env.name} (${env.id})` : env.name;
}
