// Steering: the composer (send, send and run), run, pause and interrupt, and the decision on calls that
// wait for confirmation, by button or keyboard (j/k select, y/n decide, Y/N decide all).
import { api, conversationPath } from "./api.js";
import { el, toast } from "./dom.js";

const DEFAULT_REASON = "User rejected the action";

export class Steering {
  constructor(screen) {
    this.screen = screen;
    this.busy = new Set();
    this.text = el("textarea", { rows: 2, placeholder: "Message the agent (Ctrl+Enter: send and run)", "aria-label": "Message" });
    this.text.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        this.send(true);
      }
    });
    this.composer = el("form", { class: "composer", onsubmit: (event) => { event.preventDefault(); this.send(false); } },
      this.text,
      el("div", { class: "composer-buttons" },
        el("button", { type: "submit", class: "quiet", text: "Send" }),
        el("button", { type: "button", class: "primary", text: "Send & run", onclick: () => this.send(true) })));
    this.reason = el("input", { type: "text", placeholder: DEFAULT_REASON, "aria-label": "Reason for rejecting" });
    this.count = el("span", { class: "count" });
    this.bar = el("div", { class: "pending-bar", hidden: true },
      this.count,
      el("button", { type: "button", class: "confirm", text: "Confirm all (Y)", onclick: () => this.confirm(null) }),
      el("button", { type: "button", class: "reject", text: "Reject all (N)", onclick: () => this.reject(null) }),
      el("label", { class: "reason" }, "Reason ", this.reason),
      el("span", { class: "keys", text: "j/k select · y confirm · n reject" }));
    this.onKey = (event) => this.key(event);
    document.addEventListener("keydown", this.onKey);
  }

  destroy() {
    document.removeEventListener("keydown", this.onKey);
  }

  setEnabled(enabled) {
    for (const control of this.composer.querySelectorAll("textarea, button")) control.disabled = !enabled;
  }

  /** Shows the decision bar while calls wait for confirmation. */
  update() {
    const waiting = this.waitingCalls();
    this.bar.hidden = waiting.length === 0;
    this.count.textContent = `${waiting.length} ${waiting.length === 1 ? "call waits" : "calls wait"} for your confirmation`;
    const selected = this.screen.selectedCall;
    if (waiting.length && !waiting.some((call) => call.action.event.id === selected)) {
      this.screen.selectedCall = waiting[0].action.event.id;
      return true; // the selection moved: the caller re-renders
    }
    return false;
  }

  waitingCalls() {
    return this.screen.branch.waitingCalls();
  }

  async send(run) {
    const text = this.text.value.trim();
    if (!text && !run) return;
    const path = (rest) => conversationPath(this.screen.id, rest);
    try {
      if (text) {
        await api.post(path("/messages"), { text });
        this.text.value = "";
      }
      if (run) await api.post(path("/run"), {});
    } catch (error) {
      toast(error.message, "error");
    }
  }

  async runAgain() {
    await this.intent("/run", {});
  }

  async pause() {
    await this.intent("/pause", {});
  }

  /** Stops the calls in progress now (the server kills their processes), then pauses. */
  async interrupt() {
    await this.intent("/interrupt", {});
  }

  async confirm(actionId) {
    await this.decide("/confirm", actionId, {});
  }

  async reject(actionId) {
    await this.decide("/reject", actionId, { reason: this.reason.value.trim() || DEFAULT_REASON });
  }

  async decide(route, actionId, body) {
    const ids = actionId ? [actionId] : this.waitingCalls().map((call) => call.action.event.id);
    if (!ids.length) return;
    ids.forEach((id) => this.busy.add(id));
    this.screen.transcript.refresh();
    try {
      await this.intent(route, { ...body, action_ids: ids });
    } finally {
      ids.forEach((id) => this.busy.delete(id));
      this.screen.transcript.refresh();
    }
  }

  async intent(route, body) {
    try {
      await api.post(conversationPath(this.screen.id, route), body);
    } catch (error) {
      toast(error.message, "error");
    }
  }

  key(event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (document.querySelector("dialog[open]")) return;
    const waiting = this.waitingCalls();
    if (!waiting.length) return;
    const ids = waiting.map((call) => call.action.event.id);
    const index = Math.max(0, ids.indexOf(this.screen.selectedCall));
    const handlers = {
      j: () => this.select(ids[Math.min(ids.length - 1, index + 1)]),
      k: () => this.select(ids[Math.max(0, index - 1)]),
      y: () => this.confirm(ids[index]),
      n: () => this.reject(ids[index]),
      Y: () => this.confirm(null),
      N: () => this.reject(null),
    };
    const handler = handlers[event.key];
    if (!handler) return;
    event.preventDefault();
    handler();
  }

  select(actionId) {
    this.screen.selectedCall = actionId;
    this.screen.transcript.refresh();
    this.screen.transcript.reveal(actionId);
  }
}

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}
