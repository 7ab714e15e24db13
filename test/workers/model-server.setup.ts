// globalSetup for the workers project: runs in Node and starts the scripted model server on a
// loopback port. Tests inside workerd script it over HTTP (sessions, see test/support/model-server.ts).
import type { TestProject } from "vitest/node";
import { startModelServer } from "../support/model-server";

declare module "vitest" {
  export interface ProvidedContext {
    modelServerOrigin: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startModelServer();
  project.provide("modelServerOrigin", server.origin);
  return async () => {
    await server.close();
  };
}
