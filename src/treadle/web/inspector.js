// The inspector: one event's raw JSON, its parent and children, the audit's word on it, and
// what can be done from it (show it in the transcript, continue from it, fork from it).
import { diffBlock } from "./diffs.js";
import { api, conversationPath, query } from "./api.js";
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
    actions(screen, event, path),
    event.kind === "action" ? files(event, path) : null,
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

function actions(screen, event, path) {
  const onBranch = screen.branch.ids.has(event.id);
  const restore = event.kind === "state_change" ? null : restoreChoice(event, path);
  return el("div", { class: "buttons" },
    onBranch ? el("button", { type: "button", class: "quiet", text: "Show in transcript", onclick: () => screen.reveal(event.id) }) : null,
    event.kind === "state_change" ? null : el("button", {
      type: "button", text: "Continue from here", title: "Make this event the head: the next message branches from it",
      onclick: () => screen.switchBranch(event.id, { restoreFiles: restore.input.checked }),
    }),
    restore?.label,
    el("button", {
      type: "button", text: "Fork from here", title: "A new conversation holding the path up to this event",
      onclick: () => screen.fork(event.id),
    }),
  );
}

/** "Restore files": ticked when the server says a snapshot covers the event, else disabled. */
function restoreChoice(event, path) {
  const input = el("input", { type: "checkbox", name: "restore-files", disabled: true });
  const note = el("span", { class: "note", text: " (checking…)" });
  const label = el("label", { class: "restore-files", title: "Also put the workspace's files back as they were at this event (the files as they are now are snapshotted first)" },
    input, " Restore files", note);
  api.get(path(`/snapshots${query({ covering: event.id })}`)).then((found) => {
    const snapshot = found.items[0];
    input.disabled = !snapshot;
    input.checked = Boolean(snapshot);
    note.textContent = snapshot ? ` (snapshot ${snapshot.id.slice(0, 10)})` : " (no snapshot covers this event)";
  }).catch((error) => { note.textContent = ` (${error.message})`; });
  return { input, label };
}

/** The "Files" view of a response's call: the unified diff of what its batch changed. */
function files(event, path) {
  const body = el("div", { class: "files" }, el("p", { class: "note", text: "Loading the files…" }));
  api.get(path(`/events/${encodeURIComponent(event.id)}/files`)).then((found) => {
    if (!found.changed.length) {
      body.replaceChildren(el("p", { class: "note", text: "This response's calls changed no file." }));
      return;
    }
    body.replaceChildren(
      el("p", { class: "note", text: `${found.changed.length} file(s) changed: ${found.changed.join(", ")}` }),
      diffBlock(found.diff),
    );
  }).catch((error) => body.replaceChildren(el("p", { class: "note", text: error.message })));
  return [el("h4", { text: "Files" }), body];
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
