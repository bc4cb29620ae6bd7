// The evals of the store (a list under the conversations, newest first) and one eval's screen
// (#/e/ID): its model and summary (pass@1 ± standard error), a table of its results (status,
// the reason of every one not passed, tokens, cost, time, a link to each trajectory), each
// result's patch as a diff, what the patch left out, its verify output and tests, and a
// comparison with another eval. Read-only: evals are run with `treadle eval run`.
import { api } from "./api.js";
import { $, clear, el } from "./dom.js";

const LIST_LIMIT = 50;

/** Routes the Canvas (the hash is built here from ids, never taken from data as a URL). */
function go(hash) {
  location.hash = hash;
}

function passLine(summary) {
  return `${summary.passed}/${summary.samples || summary.tasks} passed`
    + (summary.not_run ? `, ${summary.not_run} not run` : "");
}

function percent(value) {
  return `${(value * 100).toFixed(1)}%`;
}

/** A unified diff's line class, as the inspector's Files view colours it. */
function diffLine(line) {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")) return "diff-file";
  if (line.startsWith("+")) return "diff-add";
  if (line.startsWith("-")) return "diff-del";
  if (line.startsWith("@@")) return "diff-hunk";
  return "";
}

function diffView(patch) {
  return el("pre", { class: "diff eval-patch" },
    patch.split("\n").map((line) => el("span", { class: diffLine(line), text: `${line}\n` })));
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
    const more = Object.entries(summary.pass_at_k ?? {}).filter(([k]) => k !== "1")
      .map(([k, value]) => ` · pass@${k} ${percent(value)}`).join("");
    this.epochs = summary.epochs > 1;
    this.root.append(
      el("p", { class: "eval-model", text: `model ${view.model}` }),
      el("p", { class: "eval-summary", text:
        `${passLine(summary)} · pass@1 ${percent(summary.pass_rate)} ± ${percent(summary.stderr ?? 0)}${more} · `
        + `${summary.tokens.toLocaleString()} tokens · $${summary.cost_usd.toFixed(4)} · `
        + `${summary.seconds.toFixed(1)} s · ${engine.name ?? "?"} (${engine.address ?? "?"}, `
        + `${engine.workers ?? "?"} workers)` }),
      el("p", { class: "note", text: view.tasks_file }),
      this.table(view.tasks),
      el("h2", { text: "Results" }),
      ...view.tasks.map((task) => this.detail(task)),
      await this.comparePicker());
  }

  table(tasks) {
    const names = ["task", ...(this.epochs ? ["epoch"] : []), "status", "passed", "reason",
      "verify", "steps", "tokens", "cost $", "s", "attempts", "conversation"];
    const head = el("tr", {}, ...names.map((name) => el("th", { text: name })));
    const rows = tasks.map((task) => el("tr",
      { dataset: { taskId: task.task_id, epoch: String(task.epoch), passed: String(task.passed), status: task.status } },
      el("td", { text: task.task_id }),
      this.epochs ? el("td", { text: String(task.epoch) }) : null,
      el("td", {}, el("span", { class: `status status-${task.status}`, text: task.status.replaceAll("_", " ") })),
      el("td", { class: task.passed ? "eval-passed" : "eval-failed", text: task.passed ? "yes" : "no" }),
      el("td", { class: "eval-reason", text: task.passed ? "" : (task.reason ?? "no reason recorded"), title: task.reason ?? "" }),
      el("td", { text: task.verify_exit_code === null ? "-" : String(task.verify_exit_code) }),
      el("td", { text: String(task.steps) }),
      el("td", { class: "eval-tokens", text: task.tokens.toLocaleString() }),
      el("td", { class: "eval-cost", text: task.cost_usd.toFixed(4) }),
      el("td", { class: "eval-seconds", text: task.seconds.toFixed(1) }),
      el("td", { text: String(task.attempts) }),
      el("td", {}, task.conversation_id
        ? el("button", { type: "button", class: "quiet eval-open", text: "open",
          onclick: () => go(`#/c/${encodeURIComponent(task.conversation_id)}`) })
        : el("span", { class: "note", text: "none" }))));
    return el("table", { class: "eval-tasks" }, el("thead", {}, head), el("tbody", {}, ...rows));
  }

  /** One result's patch (as a diff), what it left out, its verify output and its tests. */
  detail(task) {
    const label = task.task_id + (this.epochs ? ` #${task.epoch}` : "");
    const tests = Object.entries(task.tests ?? {}).flatMap(([group, outcomes]) =>
      Object.entries(outcomes).map(([test, outcome]) =>
        el("li", { dataset: { outcome }, text: `${group}: ${test} ${outcome}` })));
    return el("details", { class: "eval-detail", dataset: { taskId: task.task_id, epoch: String(task.epoch) } },
      el("summary", { text: `${label} · ${task.status}${task.passed ? " · passed" : ""}` }),
      task.status_reason ? el("p", { class: "note", text: `conversation: ${task.status_reason}` }) : null,
      el("h3", { text: "Patch" }),
      task.patch ? diffView(task.patch) : el("p", { class: "note", text: "no change" }),
      task.patch_left_out.length
        ? el("ul", { class: "eval-left-out" }, ...task.patch_left_out.map((path) => el("li", { text: path })))
        : null,
      el("h3", { text: "Verify" }),
      task.verify_output === null
        ? el("p", { class: "note", text: "not run" })
        : el("pre", { class: "eval-verify", text: task.verify_output || "(no output)" }),
      tests.length ? el("ul", { class: "eval-tests" }, ...tests) : null);
  }

  /** A select of the other evals and the comparison with the one chosen. */
  async comparePicker() {
    const section = el("section", { class: "eval-compare" }, el("h2", { text: "Compare" }));
    let page;
    try {
      page = await api.get(`/api/evals?limit=${LIST_LIMIT}`);
    } catch (error) {
      section.append(el("p", { class: "error-text", text: error.message }));
      return section;
    }
    const others = page.items.filter((view) => view.id !== this.id);
    if (others.length === 0) {
      section.append(el("p", { class: "note", text: "no other eval to compare with" }));
      return section;
    }
    const select = el("select", { name: "compare-with", "aria-label": "Eval to compare with" },
      ...others.map((view) => el("option", { value: view.id, text: `${view.id} (${view.model})` })));
    const output = el("div", { class: "eval-comparison" });
    const compare = async () => {
      const query = `a=${encodeURIComponent(this.id)}&b=${encodeURIComponent(select.value)}`;
      try {
        clear(output).append(comparisonView(await api.get(`/api/evals/compare?${query}`)));
      } catch (error) {
        clear(output).append(el("p", { class: "error-text", text: error.message }));
      }
    };
    section.append(el("p", {}, select, " ",
      el("button", { type: "button", class: "eval-compare-button", text: "compare", onclick: compare })), output);
    return section;
  }

  close() {}
}

function sideLine(name, side) {
  return el("p", { class: `eval-side eval-side-${name}`, text:
    `${name.toUpperCase()} ${side.eval_id} (${side.model}): pass@1 ${percent(side.pass_rate)} ± `
    + `${percent(side.stderr)} over ${side.tasks} tasks × ${side.epochs} · `
    + `${side.tokens.toLocaleString()} tokens · $${side.cost_usd.toFixed(4)} · ${side.seconds.toFixed(1)} s` });
}

function comparisonView(comparison) {
  const paired = comparison.paired_difference;
  const sign = paired.mean >= 0 ? "+" : "";
  const rows = comparison.differences.map((diff) => {
    const failed = diff.change.startsWith("passed in A") ? diff.b : diff.a;
    return el("tr", { dataset: { taskId: diff.task_id } },
      el("td", { text: diff.task_id }),
      el("td", { class: "eval-change", text: diff.change }),
      el("td", { text: `${Math.round(diff.a.share * 100)}% ${diff.a.status}` }),
      el("td", { text: `${Math.round(diff.b.share * 100)}% ${diff.b.status}` }),
      el("td", { class: "eval-reason", text: failed.reason ?? "" }));
  });
  return el("div", {},
    sideLine("a", comparison.a),
    sideLine("b", comparison.b),
    el("p", { class: "eval-paired", text:
      `paired difference A − B: ${sign}${percent(paired.mean)} ± ${percent(paired.stderr)} over `
      + `${paired.tasks} common tasks · ${comparison.differences.length} differ` }),
    rows.length
      ? el("table", { class: "eval-tasks eval-differences" },
        el("thead", {}, el("tr", {}, ...["task", "change", "A", "B", "why"].map((name) => el("th", { text: name })))),
        el("tbody", {}, ...rows))
      : el("p", { class: "note", text: "no task differs" }));
}
