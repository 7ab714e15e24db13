// Schema checks against Daytona's official OpenAPI specs (test/fixtures/daytona-openapi, kept in
// the repository so a clone tests alone).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";

const SPEC_DIR = process.env.DAYTONA_OPENAPI_DIR ?? fileURLToPath(new URL("../fixtures/daytona-openapi", import.meta.url));

type AddFormats = (ajv: Ajv) => void;
// CJS module: depending on interop the function is the default export or its `.default`.
const addFormats: AddFormats = ((addFormatsModule as unknown as { default?: AddFormats }).default ?? addFormatsModule) as AddFormats;

export function loadValidators() {
  // strict: false because the specs carry OpenAPI-only keywords (example, x-*, discriminator).
  const ajv = new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  const api = JSON.parse(readFileSync(`${SPEC_DIR}/api.json`, "utf8"));
  const toolbox = JSON.parse(readFileSync(`${SPEC_DIR}/toolbox.json`, "utf8"));
  ajv.addSchema({ $id: "api.json", components: { schemas: api.components.schemas } });
  ajv.addSchema({ $id: "toolbox.json", definitions: toolbox.definitions });
  const check = (ref: string, value: unknown) => {
    const validate = ajv.getSchema(ref);
    if (!validate) throw new Error(`no schema ${ref}`);
    if (!validate(value)) {
      throw new Error(`${ref} mismatch: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(value).slice(0, 800)}`);
    }
  };
  return {
    api: (name: string, value: unknown) => check(`api.json#/components/schemas/${name}`, value),
    toolbox: (name: string, value: unknown) => check(`toolbox.json#/definitions/${name}`, value),
    /** Response schema name the spec declares for a path/method/status, to keep tests honest. */
    declared(spec: "api" | "toolbox", path: string, method: string, status: number): string | undefined {
      const doc = spec === "api" ? api : toolbox;
      const r = doc.paths[path]?.[method.toLowerCase()]?.responses?.[String(status)];
      const ref: string | undefined = r?.content?.["application/json"]?.schema?.$ref ?? r?.content?.["application/json"]?.schema?.items?.$ref ?? r?.schema?.$ref ?? r?.schema?.items?.$ref;
      return ref?.split("/").pop();
    },
  };
}
