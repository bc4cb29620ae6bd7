// The active branch's transcript as the server computes it (GET .../transcript, the core's
// events.view): items in order, the newest page first, older pages on demand; live frames ask
// for the tail again. Batching calls, pairing results and resolving parents are the server's
// rules: nothing here re-derives them.
import { api, conversationPath, query } from "./api.js";

export const FIRST_PAGE = 100;
export const OLDER_PAGE = 300;
const TAIL_AGAIN = 60; // the newest items fetched again on live events (their calls' states change)

// The server's item types as the cards name them.
const CARD_TYPES = { system_prompt: "system", result: "orphan", state_change: "other", foreign: "other" };

export class Timeline {
  constructor(conversationId, headId) {
    this.conversationId = conversationId;
    this.headId = headId;
    this.raw = []; // the server's items, oldest loaded first
    this.nextBefore = null; // the seq cursor of older items, null at the branch's start
    this.build();
  }

  /** Whether older items than the loaded ones exist. */
  get more() {
    return this.nextBefore !== null;
  }

  async fetch(params) {
    const path = conversationPath(this.conversationId, `/transcript${query({ head: this.headId, ...params })}`);
    return api.get(path);
  }

  async loadNewest() {
    this.raw = [];
    this.nextBefore = null;
    if (this.headId) {
      const page = await this.fetch({ limit: FIRST_PAGE });
      this.raw = page.items;
      this.nextBefore = page.next_before_seq;
    }
    this.build();
  }

  async loadOlder() {
    if (!this.more) return false;
    const page = await this.fetch({ before_seq: this.nextBefore, limit: OLDER_PAGE });
    this.raw = [...page.items, ...this.raw];
    this.nextBefore = page.next_before_seq;
    this.build();
    return true;
  }

  /** The branch went on to `headId` (a live frame): fetch the end of the transcript again
   * and put it in place of the loaded items from its first one on. */
  async refreshTail(headId) {
    this.headId = headId;
    const page = await this.fetch({ limit: TAIL_AGAIN });
    const first = page.items[0]?.event_id;
    const at = first === undefined ? -1 : this.raw.findIndex((item) => item.event_id === first);
    if (at >= 0) {
      this.raw = [...this.raw.slice(0, at), ...page.items];
    } else {
      // More came than the tail holds (or nothing was loaded): start again from the newest.
      this.raw = page.items;
      this.nextBefore = page.next_before_seq;
    }
    this.build();
  }

  /** Calls the server says have no result yet, oldest first (LINK-PENDING). */
  pendingCalls() {
    return this.items
      .flatMap((item) => (item.type === "condensed" ? item.children : [item]))
      .filter((item) => item.type === "response")
      .flatMap((item) => item.calls)
      .filter((call) => call.state === "pending");
  }

  /** Index in `items` of the item showing event `id` (a condensed span for a forgotten one). */
  indexOf(id) {
    const item = this.itemOf.get(id);
    if (!item) return -1;
    return (item.span ?? item).index;
  }

  build() {
    this.ids = new Set();
    this.itemOf = new Map();
    const items = this.raw.map((raw) => this.cardItem(raw));
    const forgotten = forgottenIds(items);
    this.items = forgotten.size ? collapseForgotten(items, forgotten) : items;
    this.items.forEach((item, index) => { item.index = index; });
  }

  /** A server item in the shape the cards draw: `entry` ({seq, event}) is its first event. */
  cardItem(raw) {
    const item = { type: CARD_TYPES[raw.type] ?? raw.type, key: raw.event_id, version: 0 };
    if (raw.type === "response") {
      item.calls = raw.calls.map((call) => ({ ...call, extra: [] }));
      item.entry = item.calls[0].action;
      item.responseId = raw.llm_response_id;
      for (const call of item.calls) this.show(item, call.action, call.result);
    } else {
      item.entry = { seq: raw.seq, event: raw.event };
      this.show(item, item.entry);
    }
    return item;
  }

  show(item, ...entries) {
    for (const entry of entries) {
      if (!entry) continue;
      this.ids.add(entry.event.id);
      this.itemOf.set(entry.event.id, item);
    }
  }
}

// -- condensation: runs of forgotten items are collapsed (display only) ----------------------

function forgottenIds(items) {
  const ids = new Set();
  for (const item of items) {
    const event = item.entry.event;
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
