// One transcript item as DOM: message, model response card (its calls, their arguments and
// results), condensation, collapsed span. Model and tool text only ever goes in as text.
import { fileEditDiff } from "./diffs.js";
import { clockTime, el, snippet } from "./dom.js";
import { liveOutputBox } from "./live_output.js";

const TEXT_LIMIT = 20000; // longer outputs show a button: a huge <pre> would stall the page

/**
 * @param item a Timeline item
 * @param ctx {violations: Map, selectedCall, busy: Set, onConfirm, onReject, liveOutput}
 */
export function renderItem(item, ctx) {
  const render = RENDERERS[item.type] ?? renderOther;
  const node = render(item, ctx);
  node.dataset.key = item.key;
  return node;
}

const RENDERERS = {
  message: renderMessage,
  system_prompt: renderSystem,
  response: renderResponse,
  result: renderOrphan,
  condensation: renderCondensation,
  condensed: renderCondensed,
  pause: renderPause,
  state_change: renderOther,
  foreign: renderOther,
};

function renderMessage(item, ctx) {
  const event = item.entry.event;
  const who = event.role === "assistant" ? "agent" : "user";
  return eventBox("div", `item item-message from-${who}`, item.entry, ctx,
    head(who === "agent" ? "Agent" : "User", item.entry),
    longText("div", "text", event.text),
    skillsText(event.activated_skills, (event.extended_content ?? []).join("\n")),
    event.reasoning ? foldedText("Reasoning", event.reasoning) : null,
  );
}

function renderSystem(item, ctx) {
  const event = item.entry.event;
  const tools = (event.tools ?? []).length;
  const box = eventBox("details", "item item-system", item.entry, ctx,
    el("summary", {}, head("System prompt", item.entry, `${tools} tools`)),
    longText("div", "text", event.text),
    event.context != null ? skillsText(event.skills, event.context) : null,
  );
  return box;
}

/** The workspace skills the runtime added to an event (docs/skills.md), folded. */
function skillsText(names, text) {
  if (!names || !names.length) return null;
  return el("div", { class: "skills" }, foldedText(`Skills: ${names.join(", ")}`, text));
}

function renderResponse(item, ctx) {
  const first = item.entry.event;
  const calls = item.calls;
  const label = calls.length === 1 ? "1 call" : `${calls.length} calls`;
  return el("div", { class: "item item-response", dataset: { eventId: first.id } },
    head("Agent", item.entry, `${label} · response ${snippet(item.responseId, 28)}`),
    first.thought ? longText("div", "text", first.thought) : null,
    first.reasoning ? foldedText("Reasoning", first.reasoning) : null,
    el("ol", { class: "calls" }, calls.map((call) => renderCall(call, ctx))),
  );
}

function renderCall(call, ctx) {
  const action = call.action.event;
  const state = callState(call);
  const box = el("li", {
    class: `call state-${state}${ctx.selectedCall === action.id ? " selected" : ""}`,
    dataset: { eventId: action.id, callId: action.tool_call_id },
  },
  el("div", { class: "call-head" },
    el("span", { class: "tool", text: action.tool_name }),
    el("span", { class: "chip", text: STATE_LABELS[state] }),
    el("span", { class: "call-id", text: action.tool_call_id, title: "tool_call_id" }),
    badges(action.id, ctx),
  ),
  renderArguments(action),
  );
  if (state === "waiting") box.append(decisionButtons(action, ctx));
  const live = call.result ? null : ctx.liveOutput?.(action.id);
  box.append(call.result ? renderResult(call.result, ctx) : live ? liveOutputBox(live) : pendingNote(state));
  return box;
}

const STATE_LABELS = {
  waiting: "waiting for confirmation",
  running: "running",
  pending: "no result yet",
  interrupted: "interrupted",
  done: "done",
  error: "error",
  rejected: "rejected",
};

/** The server's state of the call (events.view: waiting and running come from the status
 * there), shown as an error when its result says it is one. */
function callState(call) {
  if (call.state === "errored") return "error";
  if (call.state === "done" && call.result?.event.is_error) return "error";
  return call.state; // done, rejected, interrupted
}

function renderArguments(action) {
  if (action.arguments === undefined || action.arguments === null) {
    return el("div", { class: "args" },
      el("span", { class: "chip chip-warn", text: "unparseable arguments" }),
      el("pre", { class: "raw", text: action.raw_arguments ?? "" }));
  }
  const json = el("pre", { class: "args", text: JSON.stringify(action.arguments, null, 2) });
  const change = action.tool_name === "file_editor" ? fileEditDiff(action.arguments) : null;
  if (!change) return json;
  // A file written or edited reads as the change itself; the arguments stay one click away.
  return el("div", { class: "file-edit" }, change,
    el("details", { class: "fold" }, el("summary", { text: "Arguments (JSON)" }), json));
}

function decisionButtons(action, ctx) {
  const busy = ctx.busy.has(action.id);
  return el("div", { class: "decide" },
    el("button", {
      type: "button", class: "confirm", disabled: busy, text: "Confirm (y)",
      onclick: () => ctx.onConfirm(action.id),
    }),
    el("button", {
      type: "button", class: "reject", disabled: busy, text: "Reject (n)",
      onclick: () => ctx.onReject(action.id),
    }),
  );
}

function pendingNote(state) {
  const text = {
    waiting: "Waiting for your decision: confirm to run it, reject to refuse it.",
    running: "Running…",
    pending: "No result yet.",
    interrupted: "No result: the conversation went on without it.",
  }[state];
  return el("div", { class: "result result-pending", text });
}

/** An agent error that closed a call stopped before its end says who stopped it. */
const INTERRUPTED_LABELS = { user: "Interrupted by the user", crash: "Interrupted (its run stopped)" };

function renderResult(entry, ctx) {
  const event = entry.event;
  const label = {
    observation: event.is_error ? "Result (error)" : "Result",
    agent_error: INTERRUPTED_LABELS[event.interrupted] ?? "Agent error",
    user_rejection: `Rejected by the ${event.rejected_by ?? "user"}`,
  }[event.kind] ?? event.kind;
  const body = {
    observation: () => longText("pre", "output", event.content ?? ""),
    agent_error: () => longText("pre", "output", event.error ?? ""),
    user_rejection: () => el("div", { class: "reason", text: event.reason ?? "" }),
  }[event.kind];
  const exit = event.data?.exit_code;
  const marks = `${event.is_error ? " is-error" : ""}${event.interrupted ? " is-interrupted" : ""}`;
  return el("div", { class: `result result-${event.kind}${marks}`, dataset: { eventId: event.id } },
    el("div", { class: "result-head" },
      el("span", { class: "label", text: label }),
      exit !== undefined ? el("span", { class: "chip", text: `exit ${exit}` }) : null,
      el("span", { class: "seq", text: `#${entry.seq}`, title: "seq" }),
      el("time", { text: clockTime(event.timestamp), title: event.timestamp }),
      badges(event.id, ctx),
    ),
    body ? body() : null,
  );
}

function renderOrphan(item, ctx) {
  const event = item.entry.event;
  return el("div", { class: "item item-orphan" },
    el("div", { class: "note", text: `Result of call ${event.tool_call_id} (${event.tool_name}); it answers no open call on this branch.` }),
    renderResult(item.entry, ctx),
  );
}

function renderCondensation(item, ctx) {
  const event = item.entry.event;
  const count = (event.forgotten_event_ids ?? []).length;
  return eventBox("details", "item item-condensation", item.entry, ctx,
    el("summary", {}, head("Condensation", item.entry, `${count} events forgotten`)),
    event.summary ? longText("div", "text", event.summary) : el("div", { class: "note", text: "No summary." }),
    event.summary_offset !== undefined ? el("div", { class: "note", text: `Summary stands at offset ${event.summary_offset}.` }) : null,
    event.note ? el("div", { class: "note", text: `Why: ${event.note}` }) : null,
    event.usage ? el("div", { class: "note", text: `Summary call: ${event.usage.prompt_tokens ?? 0} tokens in, ${event.usage.completion_tokens ?? 0} out, $${(event.usage.cost_usd ?? 0).toFixed(4)}.` }) : null,
  );
}

/** A run of forgotten items: collapsed; its cards are built only when opened. */
function renderCondensed(item, ctx) {
  const count = item.children.length;
  const box = el("details", { class: "item item-condensed" },
    el("summary", { text: `${count} ${count === 1 ? "item" : "items"} condensed away (no longer in the model's context)` }));
  let built = false;
  const build = () => {
    if (built) return;
    built = true;
    box.append(...item.children.map((child) => renderItem(child, ctx)));
  };
  lazyContent.set(box, build);
  box.addEventListener("toggle", () => { if (box.open) build(); });
  return box;
}

/** Content a <details> builds only when first opened, by box. */
const lazyContent = new WeakMap();

/** Opens a <details> and builds at once what it would build on its toggle event (which comes
 * later, as a task): a re-render restoring what was open also restores what is inside. */
export function openDetails(node) {
  node.open = true;
  lazyContent.get(node)?.();
}

function renderPause(item, ctx) {
  return eventBox("div", "item item-pause", item.entry, ctx,
    // The runtime pauses as the environment (a budget reached: the status's reason says which).
    el("span", { text: `Paused by the ${item.entry.event.source === "environment" ? "runtime" : item.entry.event.source} · ${clockTime(item.entry.event.timestamp)}` }));
}

function renderOther(item, ctx) {
  const event = item.entry.event;
  const kind = event.kind === "foreign" ? `foreign event (${event.foreign_kind})` : event.kind;
  return eventBox("div", "item item-other", item.entry, ctx, head(kind, item.entry));
}

// -- shared pieces ------------------------------------------------------------------------

function eventBox(tag, className, entry, ctx, ...children) {
  const box = el(tag, { class: className, dataset: { eventId: entry.event.id } }, ...children);
  const marks = badges(entry.event.id, ctx);
  if (marks) box.classList.add("has-violation");
  return box;
}

function head(title, entry, detail) {
  const event = entry.event;
  return el("div", { class: "card-head" },
    el("span", { class: "who", text: title }),
    detail ? el("span", { class: "meta", text: detail }) : null,
    el("span", { class: "seq", text: `#${entry.seq}`, title: "seq" }),
    el("time", { text: clockTime(event.timestamp), title: event.timestamp }),
  );
}

/** Violation badges (contract names) of the audit for one event, or null. */
function badges(eventId, ctx) {
  const found = ctx.violations.get(eventId);
  if (!found) return null;
  return el("span", { class: "badges" }, found.map((violation) => el("span", {
    class: "violation", text: violation.contract, title: violation.message,
  })));
}

function foldedText(title, text) {
  return el("details", { class: "fold" }, el("summary", { text: title }), longText("div", "text", text));
}

/** Text shown as text; past TEXT_LIMIT characters a button shows the rest. */
function longText(tag, className, text) {
  const value = String(text ?? "");
  if (value.length <= TEXT_LIMIT) return el(tag, { class: className, text: value });
  const node = el(tag, { class: className, text: value.slice(0, TEXT_LIMIT) });
  const more = el("button", {
    type: "button", class: "quiet more", text: `Show all ${value.length.toLocaleString()} characters`,
    onclick: () => { node.textContent = value; more.remove(); box.classList.add("shown-all"); },
  });
  const box = el("div", { class: "long" }, node, more);
  return box;
}

/** One line saying what an event is, for lists (search, tree, inspector links). */
export function describeEvent(event) {
  switch (event.kind) {
    case "message": return `${event.role === "assistant" ? "Agent" : "User"}: ${snippet(event.text)}`;
    case "action": return `Call ${event.tool_name}(${snippet(event.raw_arguments, 50)})`;
    case "observation": return `Result of ${event.tool_name}: ${snippet(event.content, 60)}`;
    case "agent_error": return `Agent error (${event.tool_name}): ${snippet(event.error, 60)}`;
    case "user_rejection": return `Rejected ${event.tool_name}: ${snippet(event.reason, 60)}`;
    case "condensation": return `Condensation: ${(event.forgotten_event_ids ?? []).length} forgotten`;
    case "system_prompt": return "System prompt";
    case "state_change": return `State ${event.key}: ${snippet(JSON.stringify(event.value), 50)}`;
    case "foreign": return `Foreign event ${event.foreign_kind}`;
    default: return event.kind;
  }
}
