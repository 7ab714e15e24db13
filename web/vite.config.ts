// The web UI: a static single-page app served by the worker (Workers Static Assets, see
// wrangler.toml [assets]). It talks to the same origin's public API, so it needs no build-time
// configuration.
import { defineConfig } from "vite";
import { fileURLToPath } from "node:url";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/",
  logLevel: "warn",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: { outDir: "dist", emptyOutDir: true, target: "es2022", sourcemap: false },
});
