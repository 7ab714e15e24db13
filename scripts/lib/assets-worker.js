// Static assets for `npm run serve`, the part of Workers Static Assets that a single machine
// needs: serve a file of the [assets] directory when one matches, else hand the request to the
// worker. Runs in workerd; FILES is a read-only disk service over the directory, SETTINGS the
// [assets] options, WORKER (absent in the `assets` binding's instance) the threadbox worker.
//
// Supported: html_handling auto-trailing-slash (as lookup only: /a serves a.html or a/index.html,
// no redirects), not_found_handling single-page-application / 404-page / none, run_worker_first
// true / false / a list of path patterns (`*` wildcards, `!` to exclude).

const TYPES = {
  html: "text/html; charset=utf-8", htm: "text/html; charset=utf-8", js: "text/javascript; charset=utf-8",
  mjs: "text/javascript; charset=utf-8", css: "text/css; charset=utf-8", json: "application/json",
  map: "application/json", txt: "text/plain; charset=utf-8", svg: "image/svg+xml", png: "image/png",
  jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", avif: "image/avif",
  ico: "image/x-icon", woff: "font/woff", woff2: "font/woff2", ttf: "font/ttf", otf: "font/otf",
  wasm: "application/wasm", webmanifest: "application/manifest+json", xml: "application/xml", pdf: "application/pdf",
};

function contentType(path) {
  const ext = path.slice(path.lastIndexOf(".") + 1).toLowerCase();
  return TYPES[ext] ?? "application/octet-stream";
}

/** A file of the directory, or null (the disk service answers directories with a JSON listing). */
async function file(env, path, method) {
  const r = await env.FILES.fetch(new Request(`http://assets${path}`, { method: method === "HEAD" ? "HEAD" : "GET" }));
  if (r.status !== 200 || r.headers.get("content-type") !== "application/octet-stream") {
    await r.body?.cancel();
    return null;
  }
  const headers = new Headers({ "content-type": contentType(path), "cache-control": "public, max-age=0, must-revalidate" });
  const modified = r.headers.get("last-modified");
  if (modified) headers.set("last-modified", modified);
  const length = r.headers.get("content-length");
  if (length) headers.set("content-length", length);
  return new Response(method === "HEAD" ? null : r.body, { status: 200, headers });
}

function candidates(pathname, htmlHandling) {
  if (htmlHandling === "none") return [pathname];
  if (pathname.endsWith("/")) return [`${pathname}index.html`];
  return [pathname, `${pathname}.html`, `${pathname}/index.html`];
}

async function findAsset(env, pathname, method, settings) {
  let decoded;
  try {
    decoded = decodeURIComponent(pathname);
  } catch {
    return null;
  }
  if (decoded.split("/").some((part) => part === ".." || part.startsWith("."))) return null;
  for (const path of candidates(decoded, settings.htmlHandling)) {
    const found = await file(env, path, method);
    if (found) return found;
  }
  return null;
}

function matches(pattern, pathname) {
  const re = new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
  return re.test(pathname);
}

function workerFirst(settings, pathname) {
  const rule = settings.runWorkerFirst;
  if (rule === true) return true;
  if (!Array.isArray(rule)) return false;
  if (rule.some((p) => p.startsWith("!") && matches(p.slice(1), pathname))) return false;
  return rule.some((p) => !p.startsWith("!") && matches(p, pathname));
}

async function notFoundPage(env, pathname, method) {
  const parts = pathname.split("/").slice(0, -1);
  while (parts.length > 0) {
    const page = await file(env, `${parts.join("/")}/404.html`, method);
    if (page) return new Response(page.body, { status: 404, headers: page.headers });
    parts.pop();
  }
  return null;
}

export default {
  async fetch(request, env) {
    const settings = env.SETTINGS;
    const { pathname } = new URL(request.url);
    if (env.WORKER && workerFirst(settings, pathname)) return env.WORKER.fetch(request);
    const readable = request.method === "GET" || request.method === "HEAD";
    if (readable) {
      const asset = await findAsset(env, pathname, request.method, settings);
      if (asset) return asset;
      // A page load of an app route gets the app; API calls and other fetches go on to the worker.
      const navigation = !env.WORKER || request.headers.get("sec-fetch-mode") === "navigate";
      if (settings.notFoundHandling === "single-page-application" && navigation) {
        const index = await file(env, "/index.html", request.method);
        if (index) return index;
      }
    }
    if (env.WORKER) return env.WORKER.fetch(request);
    if (readable && settings.notFoundHandling === "404-page") {
      const page = await notFoundPage(env, pathname, request.method);
      if (page) return page;
    }
    return new Response("Not Found", { status: 404 });
  },
};
