// The transcript's windowed view: only a window of at most MAX_WINDOW items is in the DOM,
// whatever the length of the branch; scrolling near an edge slides the window, and at the top
// asks for an older page. The item under the reader's eye stays put while the window moves.
import { clear, el } from "./dom.js";
import { openDetails, renderItem } from "./cards.js";

const MAX_WINDOW = 150;
const STEP = 50;
const EDGE_PX = 800; // how close to an edge the reader gets before more is rendered
const BOTTOM_PX = 80; // within this of the bottom, new items keep the view at the bottom

export class TranscriptView {
  /**
   * @param {HTMLElement} scroller the scrolling element
   * @param timeline a Timeline
   * @param {{context: () => object, loadOlder: () => Promise<boolean>, hasOlder: () => boolean}} source
   */
  constructor(scroller, timeline, source) {
    this.scroller = scroller;
    this.timeline = timeline;
    this.source = source;
    this.start = 0;
    this.end = 0;
    this.loading = false;
    this.top = el("div", { class: "older" });
    this.list = el("div", { class: "items" });
    this.newBelow = el("button", { type: "button", class: "new-below", hidden: true, text: "New events below ↓", onclick: () => this.showLatest() });
    clear(scroller).append(this.top, this.list, this.newBelow);
    let queued = false;
    scroller.addEventListener("scroll", () => {
      if (queued) return;
      queued = true;
      requestAnimationFrame(() => { queued = false; this.checkEdges(); });
    });
  }

  get items() {
    return this.timeline.items;
  }

  /** Shows the newest window and scrolls to the bottom. */
  showLatest() {
    this.end = this.items.length;
    this.start = Math.max(0, this.end - Math.min(MAX_WINDOW, STEP * 2));
    this.renderWindow();
    this.scrollToBottom();
    this.newBelow.hidden = true;
    this.updateTop();
    this.checkEdges();
  }

  /** Renders the window's items afresh; what the reader had opened or shown in full stays so
   * (a re-render comes whenever the audit, the status or the selection changes, often just
   * after a click). */
  renderWindow() {
    const ctx = this.source.context();
    const opened = new Set([...this.list.querySelectorAll(OPENED)].map(openKey));
    this.list.replaceChildren(...this.items.slice(this.start, this.end).map((item) => renderItem(item, ctx)));
    if (opened.size) reopen(this.list, opened);
  }

  /** Re-renders every item in the window (status, audit marks or selection changed). */
  refresh() {
    this.keepAnchor(() => this.renderWindow());
  }

  /** The timeline was rebuilt (older page, condensation): keep showing the same events. */
  rebuilt([firstId, lastId], following) {
    const start = firstId ? this.timeline.indexOf(firstId) : -1;
    const end = lastId ? this.timeline.indexOf(lastId) : -1;
    following = following || end < 0;
    this.start = Math.max(0, start < 0 ? 0 : start);
    this.end = following ? this.items.length : end + 1;
    this.keepAnchor(() => this.renderWindow());
    this.updateTop();
  }

  /** Whether the window reaches the newest item (new items are then shown as they come). */
  isFollowing() {
    return this.end >= this.items.length;
  }

  /** Event ids of the first and last items in the window (to find them after a rebuild). */
  windowIds() {
    const first = this.items[this.start];
    const last = this.items[this.end - 1];
    return [firstEventId(first), firstEventId(last)];
  }

  /** The end of the timeline was fetched again (live events): the reader stays where they
   * are, at the bottom when they were there; new items below are announced otherwise. */
  tailRebuilt(ids, following) {
    const atBottom = this.isAtBottom();
    const before = this.items.length;
    this.rebuilt(ids, following);
    if (following && atBottom) {
      if (this.end - this.start > MAX_WINDOW) this.trimTop(this.end - this.start - MAX_WINDOW);
      this.scrollToBottom();
    } else if (this.items.length > before) {
      this.newBelow.hidden = false;
    }
  }

  /** Brings the item showing event `id` into the window and view; false when not loaded. */
  reveal(id) {
    const index = this.timeline.indexOf(id);
    if (index < 0) return false;
    if (index < this.start || index >= this.end) {
      this.start = Math.max(0, index - STEP);
      this.end = Math.min(this.items.length, this.start + MAX_WINDOW);
      this.renderWindow();
      this.updateTop();
    }
    const node = this.list.querySelector(`[data-event-id="${CSS.escape(id)}"]`)
      ?? this.list.children[index - this.start];
    if (node) {
      if (node.tagName === "DETAILS") node.open = true;
      node.scrollIntoView({ block: "center" });
      node.classList.add("flash");
      setTimeout(() => node.classList.remove("flash"), 1600);
    }
    return true;
  }

  // -- sliding the window -------------------------------------------------------------------

  checkEdges() {
    const { scrollTop, scrollHeight, clientHeight } = this.scroller;
    if (scrollTop < EDGE_PX) this.nearTop();
    else if (scrollHeight - scrollTop - clientHeight < EDGE_PX && this.end < this.items.length) this.slideDown();
  }

  nearTop() {
    if (this.start > 0) {
      this.slideUp();
    } else if (this.source.hasOlder() && !this.loading) {
      this.loading = true;
      this.updateTop();
      this.source.loadOlder().finally(() => {
        this.loading = false;
        this.updateTop();
        requestAnimationFrame(() => this.checkEdges());
      });
    }
  }

  slideUp() {
    const from = Math.max(0, this.start - STEP);
    const ctx = this.source.context();
    const nodes = this.items.slice(from, this.start).map((item) => renderItem(item, ctx));
    this.keepAnchor(() => this.list.prepend(...nodes));
    this.start = from;
    const extra = this.end - this.start - MAX_WINDOW;
    for (let i = 0; i < extra; i += 1) this.list.lastElementChild.remove();
    if (extra > 0) this.end -= extra;
    this.updateTop();
    requestAnimationFrame(() => this.checkEdges());
  }

  slideDown() {
    const to = Math.min(this.items.length, this.end + STEP);
    const ctx = this.source.context();
    this.list.append(...this.items.slice(this.end, to).map((item) => renderItem(item, ctx)));
    this.end = to;
    if (this.end - this.start > MAX_WINDOW) this.trimTop(this.end - this.start - MAX_WINDOW);
    if (this.end === this.items.length) this.newBelow.hidden = true;
    this.updateTop();
  }

  trimTop(count) {
    this.keepAnchor(() => {
      for (let i = 0; i < count; i += 1) this.list.firstElementChild.remove();
    });
    this.start += count;
    this.updateTop();
  }

  /** Runs `mutate` without moving the first visible item on the screen. */
  keepAnchor(mutate) {
    const anchor = this.firstVisible();
    const before = anchor?.getBoundingClientRect().top;
    const key = anchor?.dataset.key;
    mutate();
    const now = anchor?.isConnected ? anchor
      : key && this.list.querySelector(`:scope > [data-key="${CSS.escape(key)}"]`);
    if (now) this.scroller.scrollTop += now.getBoundingClientRect().top - before;
  }

  firstVisible() {
    const top = this.scroller.getBoundingClientRect().top;
    for (const child of this.list.children) {
      if (child.getBoundingClientRect().bottom > top) return child;
    }
    return null;
  }

  isAtBottom() {
    const { scrollTop, scrollHeight, clientHeight } = this.scroller;
    return scrollHeight - scrollTop - clientHeight < BOTTOM_PX;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  updateTop() {
    let text = "";
    if (this.start > 0) text = "…";
    else if (this.loading) text = "Loading older events…";
    else if (this.source.hasOlder()) text = "Scroll up for older events";
    else text = this.items.length ? "Start of this branch" : "No events on this branch yet";
    this.top.textContent = text;
  }
}

/** What the reader opened: a <details>, a long text shown in full. */
const OPENED = "details[open], .long.shown-all";

/** What names an opened part across re-renders: its item's key, and for a part inside an
 * item, the fold's title or the long text's beginning as well. */
function openKey(node) {
  const item = node.closest("[data-key]");
  if (!item) return null;
  if (item === node) return item.dataset.key;
  const label = node.tagName === "DETAILS"
    ? node.querySelector(":scope > summary")?.textContent
    : node.firstElementChild?.textContent.slice(0, 200);
  return `${item.dataset.key}|${node.tagName}|${label ?? ""}`;
}

/** Opens again the parts under `root` named in `keys`, and those inside what they build. */
function reopen(root, keys) {
  for (const node of root.querySelectorAll("details:not([open]), .long:not(.shown-all)")) {
    if (!keys.has(openKey(node))) continue;
    if (node.tagName !== "DETAILS") {
      node.querySelector(":scope > button.more")?.click();
      continue;
    }
    if (node.open) continue;
    openDetails(node);
    reopen(node, keys);
  }
}

function firstEventId(item) {
  if (!item) return null;
  return item.type === "condensed" ? item.children[0].entry.event.id : item.entry.event.id;
}
