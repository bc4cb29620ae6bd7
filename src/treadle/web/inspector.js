// The inspector: one event's raw JSON, its parent and children, the audit's word on it, and
// what can be done from it (show it in the transcript, continue from it, fork from it).
import { api, conversationPath } from "./api.js";
import { describeEvent } from "./cards.js";
import { append, clear, clockTime, el } from "./dom.js";

export async function renderInspector(body, screen, eventId) {
  body.append(el("p", { class: "note", text: "Loading the event…" }));
  const path = (rest) => conversationPath(screen.id, rest);
  const id = encodeURIComponent(eventId);
  let stored;
  try {
    stored = await api.get(path(`/events/${id}`));
  } catch (error) {
    body.replaceChildren(el("p", { class: "error-text", text: error.message }));
    return;
  }
  if (screen.inspected !== eventId) return; // another event was clicked meanwhile
  const event = stored.event;
  append(clear(body),
    el("h3", { text: describeEvent(event) }),
    el("dl", { class: "facts" },
      fact("kind", event.kind), fact("seq", stored.seq), fact("source", event.source),
      fact("time", `${clockTime(event.timestamp)} (${event.timestamp})`), fact("id", event.id)),
    violationsOf(screen, event.id),
    actions(screen, event),
    el("h4", { text: "Parent" }),
    parentLink(screen, event, path),
    el("h4", { text: "Children" }),
    childrenList(screen, event, path),
    el("h4", { text: "Raw JSON" }),
    el("pre", { class: "raw-json", text: JSON.stringify(event, null, 2) }),
  );
}

function fact(name, value) {
  return [el("dt", { text: name }), el("dd", { text: String(value) })];
}

function violationsOf(screen, eventId) {
  const found = screen.audit?.byEvent.get(eventId);
  if (!found) return null;
  return el("ul", { class: "violations" }, found.map((violation) => el("li", { class: "violation-row" },
    el("span", { class: "violation", text: violation.contract }),
    el("span", { class: "message", text: violation.message }))));
}

function actions(screen, event) {
  const onBranch = screen.branch.ids.has(event.id);
  return el("div", { class: "buttons" },
    onBranch ? el("button", { type: "button", class: "quiet", text: "Show in transcript", onclick: () => screen.reveal(event.id) }) : null,
    event.kind === "state_change" ? null : el("button", {
      type: "button", text: "Continue from here", title: "Make this event the head: the next message branches from it",
      onclick: () => screen.switchBranch(event.id),
    }),
    el("button", {
      type: "button", text: "Fork from here", title: "A new conversation holding the path up to this event",
      onclick: () => screen.fork(event.id),
    }),
  );
}

function parentLink(screen, event, path) {
  const parent = event.parent_id;
  if (parent === "__root__") return el("p", { class: "note", text: "None: this event is a root." });
  if (parent === undefined) return el("p", { class: "note", text: "Not recorded (legacy): the event appended just before it, or none when first." });
  const button = el("button", { type: "button", class: "link", text: parent, onclick: () => screen.inspect(parent) });
  api.get(path(`/events/${encodeURIComponent(parent)}`))
    .then((found) => { button.textContent = `#${found.seq} ${describeEvent(found.event)}`; })
    .catch(() => { button.textContent = `${parent} (not in this log)`; });
  return el("div", {}, button);
}

function childrenList(screen, event, path) {
  const list = el("ul", { class: "children" }, el("li", { class: "note", text: "Loading…" }));
  api.get(path(`/events/${encodeURIComponent(event.id)}/children`)).then((children) => {
    list.replaceChildren(...children.map((child) => el("li", { class: child.kind === "state_change" ? "side" : "" },
      el("button", { type: "button", class: "link", text: describeEvent(child), title: child.id, onclick: () => screen.inspect(child.id) }))));
    if (!children.length) list.append(el("li", { class: "note", text: "None: this event is a leaf." }));
  }).catch((error) => list.replaceChildren(el("li", { class: "error-text", text: error.message })));
  return list;
}
