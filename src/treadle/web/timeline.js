// The active branch's transcript as the server computes it (GET .../transcript, the core's
// events.view): items in order, the newest page first, older pages on demand; each live frame
// says what its event changes in it (its `transcript` updates: a new item, a call changed,
// items folded by a condensation), applied here as they are. Batching calls, pairing results,
// the calls' states and what a condensation folds are the server's rules: nothing here
// re-derives them.
import { api, conversationPath, query } from "./api.js";

export const FIRST_PAGE = 100;
export const OLDER_PAGE = 300;

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

  /** The branch went on to `headId` (a live frame): apply what its event changes in the
   * transcript (docs/stream.md, `transcript`), as the server says it. */
  apply(updates, headId) {
    this.headId = headId;
    for (const update of updates) {
      if (update.op === "item") this.addItem(update.item);
      else if (update.op === "call") {
        const item = this.raw.find((raw) => raw.event_id === update.item);
        // a call the page does not hold (an older page's): the next page load brings it
        if (item && update.index <= item.calls.length) item.calls[update.index] = update.call;
      } else if (update.op === "fold") {
        const folded = new Set(update.items);
        for (const item of this.raw) if (folded.has(item.event_id)) item.folded_by = update.by;
      }
    }
    this.build();
  }

  /** A new item is the newest; a state change goes after the item showing its parent (and
   * the state changes shown there already), as the server's page places it. */
  addItem(item) {
    const shown = item.type === "state_change" ? this.itemOf.get(item.parent_id) : null;
    let at = shown ? this.raw.indexOf(shown.raw) + 1 : this.raw.length;
    while (shown && at < this.raw.length && this.raw[at].type === "state_change") at += 1;
    this.raw.splice(at, 0, item);
  }

  /** Calls the server says wait for a confirmation, oldest first. */
  waitingCalls() {
    return this.items
      .flatMap((item) => (item.type === "condensed" ? item.children : [item]))
      .filter((item) => item.type === "response")
      .flatMap((item) => item.calls)
      .filter((call) => call.state === "waiting");
  }

  /** Index in `items` of the item showing event `id` (a condensed span for a forgotten one). */
  indexOf(id) {
    const item = this.itemOf.get(id);
    if (!item) return -1;
    return (item.span ?? item).index;
  }

  /** The cards' items: the server's, with each run of items a condensation folded (their
   * `folded_by`, the server's) shown as one collapsed span. */
  build() {
    this.ids = new Set();
    this.itemOf = new Map();
    this.items = [];
    let span = null;
    for (const raw of this.raw) {
      const item = this.cardItem(raw);
      if (!raw.folded_by) {
        span = null;
        this.items.push(item);
        continue;
      }
      if (!span) {
        span = { type: "condensed", key: `span-${item.key}`, children: [], version: 0, entry: item.entry };
        this.items.push(span);
      }
      span.children.push(item);
      item.span = span;
    }
    this.items.forEach((item, index) => { item.index = index; });
  }

  /** A server item as the cards draw it: `entry` ({seq, event}) is its first event. */
  cardItem(raw) {
    const item = { type: raw.type, key: raw.event_id, version: 0, raw };
    if (raw.type === "response") {
      item.calls = raw.calls;
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
