// The evals of the store (a list under the conversations, newest first) and one eval's screen
// (#/e/ID): its summary and a table of its tasks, each opening the conversation of its last
// attempt. Read-only: evals are run with `treadle eval run`.
import { api } from "./api.js";
import { $, clear, el } from "./dom.js";

const LIST_LIMIT = 50;

/** Routes the Canvas (the hash is built here from ids, never taken from data as a URL). */
function go(hash) {
  location.hash = hash;
}

function passLine(summary) {
  return `${summary.passed}/${summary.tasks} passed`
    + (summary.not_run ? `, ${summary.not_run} not run` : "");
}

export async function refreshEvalList(activeEvalId) {
  let page;
  try {
    page = await api.get(`/api/evals?limit=${LIST_LIMIT}`);
  } catch (error) {
    $("#eval-note").textContent = error.message;
    return;
  }
  $("#evals").hidden = page.items.length === 0;
  clear($("#eval-list")).append(...page.items.map((view) => el("li",
    { class: view.id === activeEvalId ? "active" : "", dataset: { evalId: view.id } },
    el("button", { type: "button", class: "conversation-link", title: view.tasks_file, onclick: () => go(`#/e/${encodeURIComponent(view.id)}`) },
      el("span", { class: "conversation-title", text: view.id }),
      el("span", { class: "conversation-meta" },
        el("span", { class: "eval-pass", text: passLine(view.summary) }),
        el("span", { text: `$${view.summary.cost_usd.toFixed(4)}` }))))));
}

/** The screen of one eval: built from GET /api/evals/{id}. */
export class EvalScreen {
  constructor(evalId) {
    this.id = evalId;
    this.root = el("section", { class: "eval-screen", dataset: { evalId } },
      el("h1", { text: `Eval ${evalId}` }));
  }

  async open() {
    const view = await api.get(`/api/evals/${encodeURIComponent(this.id)}`);
    const engine = view.engine ?? {};
    const summary = view.summary;
    this.root.append(
      el("p", { class: "eval-summary", text:
        `${passLine(summary)} (${Math.round(summary.pass_rate * 100)}%) · `
        + `${summary.tokens.toLocaleString()} tokens · $${summary.cost_usd.toFixed(4)} · `
        + `${summary.seconds.toFixed(1)} s · ${engine.name ?? "?"} (${engine.address ?? "?"}, `
        + `${engine.workers ?? "?"} workers)` }),
      el("p", { class: "note", text: view.tasks_file }),
      this.table(view.tasks));
  }

  table(tasks) {
    const head = el("tr", {}, ...["task", "status", "passed", "verify", "steps", "attempts", "conversation"]
      .map((name) => el("th", { text: name })));
    const rows = tasks.map((task) => el("tr", { dataset: { taskId: task.task_id, passed: String(task.passed) } },
      el("td", { text: task.task_id, title: task.reason ?? "" }),
      el("td", {}, el("span", { class: `status status-${task.status}`, text: task.status.replaceAll("_", " ") })),
      el("td", { class: task.passed ? "eval-passed" : "eval-failed", text: task.passed ? "yes" : "no" }),
      el("td", { text: task.verify_exit_code === null ? "-" : String(task.verify_exit_code) }),
      el("td", { text: String(task.steps) }),
      el("td", { text: String(task.attempts) }),
      el("td", {}, task.conversation_id
        ? el("button", { type: "button", class: "quiet eval-open", text: "open",
          onclick: () => go(`#/c/${encodeURIComponent(task.conversation_id)}`) })
        : el("span", { class: "note", text: "none" }))));
    return el("table", { class: "eval-tasks" }, el("thead", {}, head), el("tbody", {}, ...rows));
  }

  close() {}
}
