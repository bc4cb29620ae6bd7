// One open conversation: its header (status, run, pause, interrupt), the active branch as a live
// transcript, the composer, and the side panel's tabs (inspect, search, branches, audit).
import { api, conversationPath } from "./api.js";
import { loadAudit, renderAudit } from "./audit.js";
import { conversationTitle, updateListEntry } from "./conversations.js";
import { renderBranches } from "./branches.js";
import { el, toast } from "./dom.js";
import { renderInspector } from "./inspector.js";
import { renderSearch } from "./search.js";
import { Steering } from "./steering.js";
import { LiveOutput } from "./live_output.js";
import { EventStream } from "./stream.js";
import { Timeline } from "./timeline.js";
import { TranscriptView } from "./transcript.js";

// Statuses whose reason the user must see (why a run failed, got stuck or stopped); a run
// whose process died shows as "running" with a reason starting "interrupted".
const REASON_LABELS = { error: "Failed", stuck: "Stuck", paused: "Paused" };
// Close codes worth telling the user about while retrying: server error, restart, store
// unavailable ("try again later"), bad gateway. (A plain reconnect, 4408, is routine.)
const SERVER_TROUBLE = new Set([1011, 1012, 1013, 1014]);

export class ConversationScreen {
  constructor(app, id) {
    this.app = app;
    this.id = id;
    this.status = null;
    this.audit = null;
    this.selectedCall = null;
    this.ready = false;
    this.buffer = [];
    this.closed = false;
    this.steering = new Steering(this);
    this.steering.setEnabled(false);
    this.build();
  }

  build() {
    this.title = el("h1", { class: "title" });
    this.badge = el("span", { class: "status" });
    this.counter = el("span", { class: "count" });
    this.usage = el("span", { class: "usage", title: "Tokens and cost of every model call in this conversation (every branch, summary calls too), and its budgets" });
    // Plain text only: a reason may quote a model's or a tool's (hostile) output.
    this.reasonLine = el("p", { class: "status-reason", role: "status", hidden: true });
    this.isolationLine = el("p", { class: "isolation-line", hidden: true });
    this.streamNote = el("p", { class: "stream-note", role: "alert", hidden: true });
    this.auditButton = el("button", { type: "button", class: "quiet", text: "Audit", onclick: () => this.showTab("audit") });
    this.scroller = el("div", { class: "transcript", tabindex: 0, "aria-label": "Transcript" });
    this.scroller.addEventListener("click", (event) => this.clicked(event));
    this.live = new LiveOutput(this.scroller);
    // Enabled by what the server says the status offers (its `controls`), never guessed here.
    this.controls = {
      run: el("button", { type: "button", class: "primary", text: "Run", disabled: true, dataset: { control: "run" }, onclick: () => this.steering.runAgain() }),
      pause: el("button", { type: "button", text: "Pause", disabled: true, dataset: { control: "pause" }, title: "Stop before the next call: the calls in progress end first", onclick: () => this.steering.pause() }),
      interrupt: el("button", { type: "button", class: "interrupt", text: "Interrupt", disabled: true, dataset: { control: "interrupt" }, title: "Stop the calls in progress now (their processes are killed), then pause", onclick: () => this.steering.interrupt() }),
    };
    this.lineage = el("p", { class: "lineage", hidden: true });
    this.root = el("section", { class: "conversation" },
      el("header", { class: "conversation-head" },
        this.title, this.badge, this.counter, this.usage,
        el("span", { class: "spacer" }),
        this.controls.run, this.controls.pause, this.controls.interrupt,
        el("span", { class: "divider" }),
        el("button", { type: "button", class: "quiet", text: "Branches", onclick: () => this.showTab("branches") }),
        el("button", { type: "button", class: "quiet", text: "Search", onclick: () => this.showTab("search") }),
        this.auditButton),
      this.lineage,
      this.isolationLine,
      this.reasonLine,
      this.streamNote,
      this.scroller,
      this.steering.bar,
      this.steering.composer);
    this.app.panel.onTab = (tab) => this.showTab(tab);
  }

  async open() {
    const view = await api.get(conversationPath(this.id));
    if (this.closed) return;
    this.setView(view);
    // The stream starts first and is buffered: nothing appended while the page loads is lost.
    let live;
    const streamLive = new Promise((resolve) => { live = resolve; });
    this.stream = new EventStream(this.id, view.event_count - 1, {
      onMessage: (message) => this.received(message),
      onState: (state, detail) => {
        this.app.setConnection(state, detail);
        this.showStreamNote(state, detail);
        if (state === "live") live();
      },
    });
    this.branch = new Timeline(this.id, view.head_id);
    this.transcript = new TranscriptView(this.scroller, this.branch, {
      context: () => this.context(),
      loadOlder: () => this.loadOlder(),
      hasOlder: () => this.branch.more,
    });
    await this.branch.loadNewest();
    if (this.closed) return;
    this.transcript.showLatest();
    if (this.steering.update()) this.transcript.refresh();
    if (this.branch.items.length) markPainted("treadle:first-event");
    this.steering.setEnabled(true);
    this.ready = true;
    this.flush();
    // Interactive: the first screen is shown, the controls work and live events arrive.
    await streamLive;
    if (this.closed) return;
    markPainted("treadle:interactive", () => { document.body.dataset.interactive = "true"; });
    // Every conversation shows its audit: the server extends its kept audit by the events
    // since its last answer (a first read of a large log may take a while; the page does not wait).
    setTimeout(() => this.refreshAudit(), 0);
  }

  close() {
    this.closed = true;
    this.stream?.close();
    this.steering.destroy();
    delete document.body.dataset.interactive;
  }

  setView(view) {
    this.view = view;
    this.title.textContent = conversationTitle(view);
    this.title.title = view.id;
    this.setStatus(view.status, view.status_reason, view.controls);
    this.showLineage(view);
    this.counter.textContent = `${view.event_count.toLocaleString()} events`;
    this.showUsage();
    if (view.isolation) this.showIsolation(view.isolation);
  }

  /** What the last run's tools ran under (its recorded isolation fact, as the server's view
   * or an isolation frame serves it: the count of runs without a sandbox is the server's). */
  showIsolation(isolation) {
    const none = isolation.sandbox === "none";
    let text = none
      ? "No sandbox: the tools ran unconfined, as the user of the process that ran them"
      : `Sandbox: ${isolation.sandbox}, network ${isolation.network}`;
    if (!none && isolation.mounts_ro?.length) text += `, read-only ${isolation.mounts_ro.join(", ")}`;
    if (!none && isolation.unsandboxed_runs) text += ` (${isolation.unsandboxed_runs} earlier run(s) without a sandbox)`;
    const limits = Object.entries(isolation.limits ?? {}).map(([name, value]) => `${name} ${value ?? "unlimited"}`);
    this.isolationLine.textContent = text;
    this.isolationLine.title = [limits.join(", "), isolation.override ?? ""].filter(Boolean).join("; ");
    this.isolationLine.className = `isolation-line ${none ? "isolation-none" : "isolation-sandbox"}`;
    this.isolationLine.dataset.sandbox = isolation.sandbox;
    this.isolationLine.hidden = false;
  }

  /** The conversation's usage totals as the server serves them (its view, then each event
   * frame's), each beside its budget when the settings set one. */
  showUsage() {
    const view = this.view;
    const settings = view.metadata?.settings ?? {};
    const tokens = (view.prompt_tokens ?? 0) + (view.completion_tokens ?? 0);
    const cost = view.cost_usd ?? 0;
    const ofTokens = settings.max_total_tokens != null ? ` of ${settings.max_total_tokens.toLocaleString()}` : "";
    const ofCost = settings.max_cost_usd != null ? ` of $${settings.max_cost_usd.toFixed(4)}` : "";
    this.usage.textContent = `${tokens.toLocaleString()}${ofTokens} tokens · $${cost.toFixed(4)}${ofCost}`;
  }

  setStatus(status, reason, controls) {
    this.showControls(controls ?? []);
    this.status = status;
    this.statusReason = reason ?? null;
    this.badge.textContent = status.replaceAll("_", " ");
    this.badge.className = `status status-${status}`;
    this.badge.title = reason ?? "";
    this.root.dataset.status = status;
    this.showReason(status, reason);
  }

  /** Run, Pause and Interrupt as the status allows them; a title says why one is off. */
  showControls(controls) {
    const why = {
      run: "Nothing to run: send a message (Send & run) to continue",
      pause: "Not running",
      interrupt: "No call in progress",
    };
    for (const [name, button] of Object.entries(this.controls)) {
      const allowed = controls.includes(name);
      button.disabled = !allowed;
      button.dataset.title ??= button.title;
      button.title = allowed ? button.dataset.title : why[name];
    }
  }

  /** Where this conversation was forked from (its origin, in its view). */
  showLineage(view) {
    const origin = view.metadata?.origin;
    this.origin = [];
    if (origin && typeof origin.forked_from === "string") {
      this.origin.push("Forked from ", this.conversationLink(origin.forked_from),
        typeof origin.event_id === "string" ? ` at event ${origin.event_id.slice(0, 8)}` : "");
    }
    this.drawLineage();
  }

  /** The conversations forked from this one among the listed ones (the list the sidebar
   * holds already: no request of its own), each a link. */
  showForks(listed) {
    const forks = listed.filter((item) => item.metadata?.origin?.forked_from === this.id);
    this.forks = [];
    if (forks.length) {
      this.forks.push(`${forks.length === 1 ? "1 fork" : `${forks.length} forks`}: `);
      forks.forEach((fork, index) => {
        if (index) this.forks.push(", ");
        this.forks.push(this.conversationLink(fork.id, conversationTitle(fork)));
      });
    }
    this.drawLineage();
  }

  drawLineage() {
    const parts = [...(this.origin ?? [])];
    if (parts.length && this.forks?.length) parts.push(" · ");
    parts.push(...(this.forks ?? []));
    this.lineage.replaceChildren(...parts);
    this.lineage.hidden = parts.length === 0;
  }

  conversationLink(id, text) {
    return el("button", { type: "button", class: "link", title: id, text: text ?? id.slice(0, 8), onclick: () => this.app.navigate(id) });
  }

  /** The status's reason as a visible line, for the statuses where it explains what happened. */
  showReason(status, reason) {
    const interrupted = status === "running" && /^interrupted\b/i.test(reason ?? "");
    const label = interrupted ? "Interrupted" : REASON_LABELS[status];
    const shown = Boolean(label && reason);
    this.reasonLine.hidden = !shown;
    this.reasonLine.className = `status-reason reason-${interrupted ? "interrupted" : status}`;
    if (shown) this.reasonLine.replaceChildren(el("strong", { text: `${label}: ` }), reason);
    else this.reasonLine.replaceChildren();
  }

  /** Why the live stream ended or is retrying, in the server's words; gone once live again. */
  showStreamNote(state, detail) {
    let text = "";
    if (state === "gone") text = `Live updates stopped: this conversation no longer exists (${detail.reason || `code ${detail.code}`}).`;
    else if (state === "stopped") text = `Live updates stopped (code ${detail.code}): ${detail.reason || "refused by the server"}. Reload the page to try again.`;
    else if (state === "reconnecting" && detail && SERVER_TROUBLE.has(detail.code)) text = `Reconnecting: ${detail.reason} (code ${detail.code}).`;
    else if (state === "connecting") return; // keep the note until the outcome is known
    this.streamNote.textContent = text;
    this.streamNote.hidden = !text;
  }

  /** The list's entry for this conversation says what the header says: the stream is
   * ahead of the list's last refresh (it would show "running, 7 ev." beside "finished"). */
  syncListEntry(listed) {
    if (!this.view) return;
    if (listed && listed.event_count > this.view.event_count) return; // the stream catches up
    updateListEntry(this.id, this.status, this.statusReason, this.view.event_count);
  }

  /** A fresher view of this conversation (from the list): its reason may have changed while
   * its status did not (a run whose process died is "running", then "interrupted"). */
  viewRefreshed(view) {
    if (!this.view || view.status !== this.status) return; // the stream tells status changes
    if ((view.status_reason ?? null) !== this.statusReason) this.setStatus(view.status, view.status_reason, view.controls);
    if (view.event_count >= this.view.event_count) {
      // A raised budget, or totals the stream has not told (events on another branch).
      Object.assign(this.view, { metadata: view.metadata, prompt_tokens: view.prompt_tokens, completion_tokens: view.completion_tokens, cost_usd: view.cost_usd });
      this.showUsage();
    }
  }

  context() {
    return {
      violations: this.audit?.byEvent ?? new Map(),
      selectedCall: this.selectedCall,
      busy: this.steering.busy,
      onConfirm: (id) => this.steering.confirm(id),
      onReject: (id) => this.steering.reject(id),
      liveOutput: (id) => this.live.text(id),
    };
  }

  // -- live ---------------------------------------------------------------------------------

  received(message) {
    if (!this.ready) {
      this.buffer.push(message);
      return;
    }
    if (message.stored === false) { // transient frames: a call's output so far
      this.live.received(message);
      return;
    }
    if (message.type === "event") {
      if (message.answers) this.live.forget(message.answers); // its stored result shows now
      // The frame says what the status and head are after this event: mirrored, not derived.
      this.liveEvent(message);
      this.liveStatus(message.status);
      if (message.isolation) {
        this.view.isolation = message.isolation;
        this.showIsolation(message.isolation);
      }
      if (message.event.kind === "state_change" && message.head && message.head !== this.branch.headId) {
        this.headMoved(message.head);
      }
    } else if (message.type === "run_finished") this.runFinished();
  }

  flush() {
    const waiting = this.buffer;
    this.buffer = [];
    for (const message of waiting) this.received(message);
  }

  liveEvent({ seq, event, parent_id: parentId, head, usage, transcript }) {
    // The frame says the usage totals after this event (the server's): shown, not summed here.
    if (seq >= this.view.event_count && usage) {
      const { prompt_tokens, completion_tokens, cost_usd } = usage;
      Object.assign(this.view, { prompt_tokens, completion_tokens, cost_usd });
      this.showUsage();
    }
    this.view.event_count = Math.max(this.view.event_count, seq + 1);
    this.counter.textContent = `${this.view.event_count.toLocaleString()} events`;
    this.syncListEntry();
    this.app.conversationChanged();
    if (this.branch.ids.has(event.id)) return; // loaded with the page already
    // The frame's resolved parent says whether the event continues the shown branch; its
    // transcript updates say what it changes there (no refetch).
    if (event.kind === "state_change") {
      if (this.branch.ids.has(parentId)) this.tailChanged(transcript ?? [], this.branch.headId);
    } else if (parentId === this.branch.headId || (!this.branch.headId && parentId === null)) {
      this.tailChanged(transcript ?? [], event.id);
    } else if (head !== this.branch.headId) {
      this.headMoved(head);
    }
  }

  /** Apply a frame's transcript updates at once; the window is drawn again once per
   * animation frame, however many frames came meanwhile (a catch-up). */
  tailChanged(updates, headId) {
    if (!this.tailIds) {
      this.tailIds = this.transcript.windowIds();
      this.tailFollowing = this.transcript.isFollowing();
      requestAnimationFrame(() => this.drawTail());
    }
    this.branch.apply(updates, headId);
  }

  drawTail() {
    const ids = this.tailIds;
    this.tailIds = null;
    if (this.closed) return;
    this.transcript.tailRebuilt(ids, this.tailFollowing);
    this.steering.update();
    this.transcript.refresh();
  }

  liveStatus({ status, reason, controls }) {
    if (status === this.status && (reason ?? null) === this.statusReason) return;
    this.setStatus(status, reason, controls);
    this.syncListEntry();
    this.steering.update();
  }

  runFinished() {
    this.app.conversationChanged();
    this.refreshAudit();
  }

  /** The head moved (a branch switch here or elsewhere): show the new branch. */
  async headMoved(headId) {
    const head = headId ?? (await api.get(conversationPath(this.id))).head_id;
    if (head === this.branch.headId) return;
    this.ready = false;
    try {
      this.branch = new Timeline(this.id, head);
      this.transcript.timeline = this.branch;
      await this.branch.loadNewest();
      this.transcript.showLatest();
      this.steering.update();
      this.transcript.refresh();
    } finally {
      this.ready = true;
      this.flush();
    }
    if (this.app.panel.isOpen("branches")) this.showTab("branches");
  }

  async loadOlder() {
    performance.mark("treadle:older-start");
    const ids = this.transcript.windowIds();
    const following = this.transcript.isFollowing();
    try {
      if (await this.branch.loadOlder()) this.transcript.rebuilt(ids, following);
      markPainted("treadle:older-page");
    } catch (error) {
      toast(error.message, "error");
    }
  }

  async refreshAudit() {
    this.auditButton.textContent = "Audit…";
    try {
      this.audit = await loadAudit(this.id);
    } catch (error) {
      this.auditButton.textContent = "Audit (failed)";
      return;
    }
    if (this.closed) return;
    const count = this.audit.total;
    this.auditButton.textContent = count ? `Audit: ${count} ${count === 1 ? "violation" : "violations"}` : "Audit: clean";
    this.auditButton.classList.toggle("alarm", count > 0);
    this.transcript.refresh();
    if (this.app.panel.isOpen("audit")) this.showTab("audit");
    document.body.dataset.audit = "done";
  }

  // -- user actions -------------------------------------------------------------------------

  clicked(event) {
    if (event.target.closest("button, a, input, textarea, pre, .text")) return;
    const header = event.target.closest(".card-head, .call-head, .result-head");
    const holder = header?.closest("[data-event-id]");
    if (holder) this.inspect(holder.dataset.eventId);
  }

  showTab(tab) {
    const body = this.app.panel.open(tab);
    if (tab === "search") renderSearch(body, this);
    else if (tab === "branches") renderBranches(body, this);
    else if (tab === "audit") {
      if (!this.audit) this.refreshAudit();
      renderAudit(body, this);
    } else if (tab === "inspect") {
      if (this.inspected) renderInspector(body, this, this.inspected);
      else body.append(el("p", { class: "note", text: "Click an event's header to inspect it." }));
    }
  }

  inspect(eventId, { reveal = false } = {}) {
    this.inspected = eventId;
    renderInspector(this.app.panel.open("inspect"), this, eventId);
    if (reveal) this.reveal(eventId);
  }

  reveal(eventId) {
    if (!this.transcript.reveal(eventId)) toast("That event is not on the loaded part of the active branch.");
  }

  async switchBranch(eventId, { restoreFiles = false } = {}) {
    try {
      const body = restoreFiles ? { event_id: eventId, restore_files: true } : { event_id: eventId };
      const view = await api.put(conversationPath(this.id, "/head"), body);
      this.setView(view);
      await this.headMoved(view.head_id);
      toast(view.restore
        ? `Switched branch and restored the files: ${view.restore.changed.length} changed (the files as they were are snapshot ${view.restore.previous_snapshot.slice(0, 10)}: treadle restore puts them back).`
        : "Switched branch: the model's context follows the new head (files are not rolled back).");
    } catch (error) {
      toast(error.message, "error");
    }
  }

  async fork(eventId) {
    try {
      const view = await api.post(conversationPath(this.id, "/fork"), { event_id: eventId });
      toast("Forked: a new conversation holds the path up to that event (files are not copied).");
      this.app.navigate(view.id);
    } catch (error) {
      toast(error.message, "error");
    }
  }
}

/** A performance mark once the frame with the last DOM change is painted (for the bench). */
function markPainted(name, then) {
  requestAnimationFrame(() => setTimeout(() => {
    performance.mark(name);
    then?.();
  }, 0));
}
