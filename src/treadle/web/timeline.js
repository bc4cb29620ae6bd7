// The active branch as transcript items, built from its events in path order: a message, one
// card per model response holding its calls (each paired with its result by tool_call_id,
// whatever order results came in), and runs of events a condensation made forgotten.

const RESULT_KINDS = new Set(["observation", "agent_error", "user_rejection"]);
// Events that are not model-visible never end a batch of calls (PROJECT-BATCH).
const INVISIBLE_KINDS = new Set(["pause", "state_change", "foreign"]);

export class Timeline {
  constructor() {
    this.reset([]);
  }

  /** Rebuilds every item from `entries` ({seq, event}, in path order). */
  reset(entries) {
    this.entries = [];
    this.ids = new Set();
    this.items = [];
    this.itemOf = new Map(); // event id -> the item showing it
    this.calls = new Map(); // tool_call_id -> call
    this.batch = null;
    this.forgotten = forgottenIds(entries);
    for (const entry of entries) this.add(entry);
    if (this.forgotten.size) this.items = collapseForgotten(this.items, this.forgotten);
    this.items.forEach((item, index) => { item.index = index; });
  }

  /** Older events (in path order) put before the ones already here. */
  prepend(entries) {
    this.reset([...entries.filter((entry) => !this.ids.has(entry.event.id)), ...this.entries]);
  }

  /** A new event at the end of the branch: {item, created} or null when already known. */
  append(entry) {
    if (this.ids.has(entry.event.id)) return null;
    if (entry.event.kind === "condensation") {
      this.reset([...this.entries, entry]);
      return { item: null, created: false, rebuilt: true };
    }
    return this.add(entry);
  }

  get tail() {
    return this.entries.length ? this.entries[this.entries.length - 1].event : null;
  }

  /** Calls without a final result, oldest first (LINK-PENDING). */
  pendingCalls() {
    return [...this.calls.values()].filter((call) => !call.result);
  }

  add(entry) {
    const event = entry.event;
    this.entries.push(entry);
    this.ids.add(event.id);
    if (event.kind === "action") return this.addAction(entry);
    if (RESULT_KINDS.has(event.kind)) return this.addResult(entry);
    if (!INVISIBLE_KINDS.has(event.kind)) this.batch = null;
    return this.create(itemType(event), entry);
  }

  addAction(entry) {
    const event = entry.event;
    const call = { action: entry, result: null, extra: [] };
    let created = false;
    let item = this.batch;
    if (!item || item.responseId !== event.llm_response_id) {
      item = this.newItem("response", entry);
      item.responseId = event.llm_response_id;
      item.calls = [];
      this.batch = item;
      created = true;
    }
    item.calls.push(call);
    item.version += 1;
    this.calls.set(event.tool_call_id, call);
    this.itemOf.set(event.id, item);
    return { item, created };
  }

  addResult(entry) {
    this.batch = null;
    const call = this.calls.get(entry.event.tool_call_id);
    if (!call) return this.create("orphan", entry); // its call is older than what is loaded
    if (call.result) call.extra.push(entry); // a second final result (LINK-ONCE)
    else call.result = entry;
    const item = this.itemOf.get(call.action.event.id);
    item.version += 1;
    this.itemOf.set(entry.event.id, item);
    return { item, created: false };
  }

  create(type, entry) {
    const item = this.newItem(type, entry);
    this.itemOf.set(entry.event.id, item);
    return { item, created: true };
  }

  newItem(type, entry) {
    const item = { type, key: entry.event.id, entry, version: 0, index: this.items.length };
    this.items.push(item);
    return item;
  }

  /** Index in `items` of the item showing event `id` (a condensed span for a forgotten one). */
  indexOf(id) {
    const item = this.itemOf.get(id);
    if (!item) return -1;
    return (item.span ?? item).index;
  }
}

function itemType(event) {
  if (event.kind === "message") return "message";
  if (event.kind === "system_prompt") return "system";
  if (event.kind === "condensation") return "condensation";
  if (event.kind === "pause") return "pause";
  return "other";
}

function forgottenIds(entries) {
  const ids = new Set();
  for (const { event } of entries) {
    if (event.kind === "condensation") for (const id of event.forgotten_event_ids ?? []) ids.add(id);
  }
  return ids;
}

function isForgotten(item, forgotten) {
  if (item.type === "response") return item.calls.every((call) => forgotten.has(call.action.event.id));
  return forgotten.has(item.entry.event.id);
}

/** Runs of items whose events are all forgotten become one collapsed span item. */
function collapseForgotten(items, forgotten) {
  const out = [];
  let span = null;
  for (const item of items) {
    if (!isForgotten(item, forgotten)) {
      span = null;
      out.push(item);
      continue;
    }
    if (!span) {
      span = { type: "condensed", key: `span-${item.key}`, children: [], version: 0, entry: item.entry };
      out.push(span);
    }
    span.children.push(item);
    item.span = span;
  }
  return out;
}
