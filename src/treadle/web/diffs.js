// Diffs as the Canvas shows them: a unified diff's lines coloured by what they do, and the
// file editor's calls (create, str_replace, insert) drawn as the change they ask for.
import { el } from "./dom.js";

const DIFF_LIMIT = 2000; // lines shown before "…N more lines": a huge <pre> would stall the page

/** A unified diff's text as a coloured block. */
export function diffBlock(text) {
  return linesBlock(String(text ?? "").split("\n"));
}

/** The change a file editor call asks for as diff lines, or null for the other commands
 * (view, undo_edit) and arguments that are not what the tool takes. */
export function fileEditDiff(args) {
  if (!args || typeof args !== "object" || typeof args.path !== "string") return null;
  const lines = (text) => (typeof text === "string" && text !== "" ? text.replace(/\n$/, "").split("\n") : []);
  if (args.command === "create" && typeof args.file_text === "string") {
    const added = lines(args.file_text);
    return linesBlock(["--- /dev/null", `+++ ${args.path}`, `@@ new file, ${added.length} line${added.length === 1 ? "" : "s"} @@`, ...added.map((line) => `+${line}`)]);
  }
  if (args.command === "str_replace" && typeof args.old_str === "string") {
    return linesBlock([`--- ${args.path}`, `+++ ${args.path}`, "@@ replace @@",
      ...lines(args.old_str).map((line) => `-${line}`), ...lines(args.new_str).map((line) => `+${line}`)]);
  }
  if (args.command === "insert" && typeof args.new_str === "string") {
    const after = Number.isInteger(args.insert_line) ? args.insert_line : 0;
    return linesBlock([`--- ${args.path}`, `+++ ${args.path}`, `@@ insert after line ${after} @@`,
      ...lines(args.new_str).map((line) => `+${line}`)]);
  }
  return null;
}

function linesBlock(lines) {
  const shown = lines.slice(0, DIFF_LIMIT).map((line) => el("span", { class: diffLine(line), text: `${line}\n` }));
  if (lines.length > DIFF_LIMIT) shown.push(el("span", { class: "diff-hunk", text: `… ${lines.length - DIFF_LIMIT} more lines` }));
  return el("pre", { class: "diff" }, shown);
}

function diffLine(line) {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")) return "diff-file";
  if (line.startsWith("+")) return "diff-add";
  if (line.startsWith("-")) return "diff-del";
  if (line.startsWith("@@")) return "diff-hunk";
  return "";
}
