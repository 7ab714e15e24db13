import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { canWrite } from "../auth/authenticate";
import type { FolderVersion } from "../actors/house/house-actor";
import { houseStub } from "./actors";
import { unwrapRpc } from "../actors/rpc";
import { assertNoQuery, assertNoRepeatedQuery } from "./query";
import { readBoundedBody } from "./bounded-body";
import { environmentForCaller } from "./routes-environments";
import { ARCHIVE_CONTENT_TYPES, FOLDER_NAME, folderMaxBytes } from "../workspace/folders";
import { readArchive, storeFolderVersion } from "../workspace/folder-store";

function folderName(raw: string | null | undefined): string {
  if (!raw) throw new ApiError("validation_failed", "name the folder: ?name=<folder>", [{ path: "name", message: "required" }]);
  if (!FOLDER_NAME.test(raw)) throw new ApiError("validation_failed", "a folder name is letters, digits, . _ - (up to 100), starting with a letter or digit", [{ path: "name", message: "letters, digits, . _ - (up to 100), starting with a letter or digit" }]);
  return raw;
}

/** Room for a multipart body's boundaries and part headers around an archive of the largest size. */
const MULTIPART_SLACK_BYTES = 64 * 1024;

/**
 * The parts a multipart upload may have: the archive, a name field and a few a form adds. The
 * runtime's parser makes an object of every part, and a body of the largest size cut into tiny
 * fields is hundreds of thousands of them, several times the body's size in memory (a Worker has 128 MB).
 */
const MULTIPART_MAX_PARTS = 16;

const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const MEDIA_PARAM = new RegExp(`^;\\s*(${TOKEN})=(${TOKEN}|"[^"\\\\]*")\\s*`);

/**
 * The boundary of a `multipart/form-data` content type, or null unless it names exactly one in
 * plain `name=value` parameters (quoted without escapes). Anything looser could be read as
 * another boundary by the runtime's parser than by the count of parts below.
 */
function multipartBoundary(contentType: string): string | null {
  let rest = contentType.replace(/^multipart\/form-data\s*/i, "");
  const found: string[] = [];
  while (rest !== "") {
    const m = MEDIA_PARAM.exec(rest);
    if (!m) {
      if (!/^;\s*$/.test(rest)) return null;
      break;
    }
    if (m[1]!.toLowerCase() === "boundary") found.push(m[2]!.replace(/^"(.*)"$/, "$1"));
    rest = rest.slice(m[0].length);
  }
  return found.length === 1 && found[0] !== "" ? found[0]! : null;
}

/**
 * How many parts a multipart body has, counted by its delimiter lines (a boundary never occurs in
 * a part's content; the runtime's parser takes a line ended by LF alone too) up to `stopAt`; null
 * when the body does not begin with its first delimiter. A boundary holds no LF, so each LF is
 * looked at once.
 */
function multipartParts(bytes: Uint8Array, boundary: string, stopAt: number): number | null {
  const delimiter = new TextEncoder().encode(`--${boundary}`);
  const at = (i: number) => {
    if (i + delimiter.length > bytes.length) return false;
    for (let j = 0; j < delimiter.length; j++) if (bytes[i + j] !== delimiter[j]) return false;
    return true;
  };
  if (!at(0)) return null;
  let found = 1;
  for (let i = bytes.indexOf(10); i !== -1 && found <= stopAt; i = bytes.indexOf(10, i + 1)) {
    if (at(i + 1)) found++;
  }
  // The closing delimiter ends the last part and starts none.
  return found - 1;
}

/**
 * The one file of a `multipart/form-data` upload (what `curl -F file=@a.tgz` and a browser form
 * send), and its `name` field when it has one.
 */
async function multipartArchive(bytes: Uint8Array, contentType: string, maxBytes: number): Promise<{ bytes: Uint8Array; name: string | null }> {
  const boundary = multipartBoundary(contentType);
  const parts = boundary === null ? null : multipartParts(bytes, boundary, MULTIPART_MAX_PARTS + 1);
  if (parts === null) throw new ApiError("validation_failed", "the multipart/form-data body cannot be read: it begins with the one boundary its content type names");
  if (parts > MULTIPART_MAX_PARTS) {
    throw new ApiError("validation_failed", `a multipart upload has at most ${MULTIPART_MAX_PARTS} parts: the archive and its name`);
  }
  let form: FormData;
  try {
    form = await new Response(bytes, { headers: { "content-type": contentType } }).formData();
  } catch {
    throw new ApiError("validation_failed", "the multipart/form-data body cannot be read");
  }
  const files = [...form.values()].filter((v): v is File => typeof v !== "string");
  if (files.length !== 1) throw new ApiError("validation_failed", `a multipart upload carries one file, the archive (this one has ${files.length})`);
  const archive = new Uint8Array(await files[0]!.arrayBuffer());
  if (archive.byteLength > maxBytes) throw new ApiError("payload_too_large", `the archive is larger than ${maxBytes} bytes`);
  const name = form.get("name");
  return { bytes: archive, name: typeof name === "string" ? name : null };
}

/**
 * `POST /api/environments/:id/folders?name=<folder>`: the body is a tar, tar.gz or zip archive,
 * or a multipart/form-data body with the archive as its one file (the name then may also come
 * from a `name` field).
 */
export async function uploadFolderRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const { claims, environment } = await environmentForCaller(request, env, id);
  if (!canWrite(claims) || claims.role === "bot") throw new ApiError("forbidden", "only owners and members upload folders");
  const url = new URL(request.url);
  assertNoRepeatedQuery(url);
  const contentType = request.headers.get("content-type") ?? "";
  const multipart = /^multipart\/form-data\s*(;|$)/i.test(contentType);
  const queryName = url.searchParams.get("name");
  // A plain upload's name is checked before its body is read; a multipart one may carry it inside.
  if (!multipart || queryName !== null) folderName(queryName);
  const maxBytes = folderMaxBytes(env);
  let bytes = await readBoundedBody(request, multipart ? maxBytes + MULTIPART_SLACK_BYTES : maxBytes).catch((err) => {
    // The limit a client can act on is the archive's, not the multipart framing's allowance.
    if (multipart && err instanceof ApiError && err.code === "payload_too_large") throw new ApiError("payload_too_large", `the archive is larger than ${maxBytes} bytes`);
    throw err;
  });
  let formName: string | null = null;
  if (multipart) ({ bytes, name: formName } = await multipartArchive(bytes, contentType, maxBytes));
  const name = folderName(queryName ?? formName);
  if (bytes.byteLength === 0) throw new ApiError("validation_failed", "the body is empty: send a tar, tar.gz or zip archive");
  const version = await storeFolderVersion(env, claims.houseId, environment.id, name, bytes, { createdBy: claims.subject });
  return json(version, 201, { location: `/api/environments/${environment.id}/folders/${name}?version=${version.version}` });
}

/** `GET /api/environments/:id/folders`: every folder with its versions, oldest first. */
export async function listFoldersRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const { claims, environment } = await environmentForCaller(request, env, id);
  assertNoQuery(request, "GET /api/environments/:id/folders");
  const versions = await unwrapRpc(houseStub(env, claims.houseId).listFolderVersions(environment.id));
  const byName = new Map<string, FolderVersion[]>();
  for (const v of versions) byName.set(v.name, [...(byName.get(v.name) ?? []), v]);
  const folders = [...byName.entries()].map(([name, list]) => ({ name, latest: list[list.length - 1].version, versions: list }));
  return json({ folders });
}

/** `GET /api/environments/:id/folders/:name[?version=N]`: the archive (the newest version by default). */
export async function downloadFolderRoute(request: Request, env: Env, id: string | undefined, rawName: string | undefined): Promise<Response> {
  const { claims, environment } = await environmentForCaller(request, env, id);
  const url = new URL(request.url);
  assertNoRepeatedQuery(url);
  const name = folderName(rawName);
  const rawVersion = url.searchParams.get("version");
  const version = rawVersion === null ? null : Number(rawVersion);
  if (version !== null && !(Number.isInteger(version) && version > 0)) throw new ApiError("validation_failed", "version is a positive integer", [{ path: "version", message: "a positive integer" }]);
  const v = await unwrapRpc(houseStub(env, claims.houseId).getFolderVersion(environment.id, name, version));
  if (!v) throw new ApiError("not_found", version === null ? `folder ${name} has no version` : `folder ${name} has no version ${version}`);
  const { bytes } = await readArchive(env, claims.houseId, v.stream, Math.max(v.bytes, 1));
  return new Response(bytes, {
    headers: {
      "content-type": ARCHIVE_CONTENT_TYPES[v.format],
      "folder-version": String(v.version),
      "content-disposition": `attachment; filename="${name}-v${v.version}.${v.format}"`,
    },
  });
}
