// The audit of the whole log (every branch): loaded after the first screen, marks the events
// each violation concerns and lists them in the panel. The server lists the first violations
// (violations_limit, 1000 by default) and counts them all (violations_total, violation_counts).
import { api, conversationPath } from "./api.js";
import { el } from "./dom.js";

export async function loadAudit(conversationId) {
  const report = await api.get(conversationPath(conversationId, "/audit"));
  const byEvent = new Map();
  for (const violation of report.violations) {
    for (const id of violation.event_ids) {
      if (!byEvent.has(id)) byEvent.set(id, []);
      byEvent.get(id).push(violation);
    }
  }
  return { report, byEvent, total: violationsTotal(report) };
}

/** Violations found, listed or not (a server before the totals sends only the list). */
export function violationsTotal(report) {
  return report.violations_total ?? report.violations.length;
}

export function renderAudit(body, screen) {
  const audit = screen.audit;
  if (!audit) {
    body.append(el("p", { class: "note", text: "The audit is loading…" }));
    return;
  }
  const { report, total } = audit;
  const violations = report.violations;
  body.append(
    el("h3", { text: total ? plural(total, "contract violation") : "No contract violation" }),
    el("p", { class: "note", text: `Checked every branch: ${Object.values(report.counts ?? {}).reduce((a, b) => a + b, 0)} events, ${plural(report.heads.length, "head")}, ${plural(report.pending.length, "pending call")}.` }),
  );
  if (report.truncated) {
    const counts = Object.entries(report.violation_counts ?? {}).map(([name, n]) => `${name}: ${n.toLocaleString()}`).join(", ");
    body.append(el("p", { class: "note truncated", text: `The first ${plural(violations.length, "violation")} in log order are listed (${counts}).` }));
  }
  const list = el("ul", { class: "violations" });
  for (const violation of violations) {
    list.append(el("li", { class: "violation-row" },
      el("span", { class: "violation", text: violation.contract }),
      el("span", { class: "message", text: violation.message }),
      el("div", { class: "event-links" }, violation.event_ids.map((id) => el("button", {
        type: "button", class: "link", text: id.slice(0, 8), title: id,
        onclick: () => screen.inspect(id, { reveal: true }),
      }))),
    ));
  }
  body.append(list);
  for (const notice of report.notices ?? []) {
    body.append(el("p", { class: "note notice", text: `${notice.contract} (notice, not a violation): ${notice.message}` }));
  }
}

function plural(count, noun) {
  return `${count.toLocaleString()} ${noun}${count === 1 ? "" : "s"}`;
}
