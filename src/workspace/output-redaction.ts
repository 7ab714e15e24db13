import type { WorkspaceFile } from "./box-config";
import { MIN_BOX_SECRET_LENGTH, redactionList, redactText, sensitiveContentValues } from "../domain/secret-forms";

/**
 * What a command's output may show once it leaves a box through the control plane (an exec
 * answer, its live entries on a thread, a bot's tool result and so the bot's model). A shared box
 * holds what runs left there: the environment's files, a `sensitive` one included, and whatever a
 * harness wrote from its secrets (an MCP config, say). The runner and the mirror scrub what a run
 * posts by the same rule; this is that rule for the commands the control plane runs itself.
 */
export function boxOutputRedactor(e: { secrets?: Record<string, string>; files?: WorkspaceFile[] }): (text: string) => string {
  const values = [
    ...Object.values(e.secrets ?? {}),
    ...(e.files ?? []).filter((f) => f.sensitive).flatMap((f) => sensitiveContentValues(f.content)),
  ];
  const list = redactionList(values, MIN_BOX_SECRET_LENGTH);
  return list.length === 0 ? (text) => text : (text) => redactText(text, list);
}
