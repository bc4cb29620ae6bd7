// Output of the calls in progress, from the stream's transient "output" frames: a running
// call's card fills as they come, and its stored result replaces it when it lands. Live only.
import { el } from "./dom.js";

const MAX_CHARS = 65536; // kept per call (the newest): a chatty command costs bounded memory
const MAX_CALLS = 64; // calls whose result never came here are forgotten, oldest first

export class LiveOutput {
  constructor(root) {
    this.root = root; // where the calls' cards are (the transcript)
    this.calls = new Map(); // action id -> { text, end }
  }

  received(frame) {
    const { action_id: actionId, text, offset } = frame;
    if (frame.type !== "output" || typeof actionId !== "string" || typeof text !== "string") return;
    let call = this.calls.get(actionId);
    if (!call) {
      if (this.calls.size >= MAX_CALLS) this.calls.delete(this.calls.keys().next().value);
      call = { text: "", end: 0 };
      this.calls.set(actionId, call);
    }
    const start = Number.isInteger(offset) ? offset : call.end;
    // An offset past what came here: frames were dropped (a slow client) or cut.
    if (start > call.end) call.text += `[… ${start - call.end} characters not received …]\n`;
    call.text = (call.text + text.slice(Math.max(0, call.end - start))).slice(-MAX_CHARS);
    call.end = Math.max(call.end, start + text.length);
    this.show(actionId);
  }

  text(actionId) {
    return this.calls.get(actionId)?.text ?? null;
  }

  /** The call's result is stored: what came live is no longer shown. */
  forget(actionId) {
    this.calls.delete(actionId);
  }

  /** Fill the call's card if it is on screen and still has no result. */
  show(actionId) {
    const card = this.root.querySelector(`li.call[data-event-id="${CSS.escape(actionId)}"]`);
    if (!card) return; // not rendered yet: its card takes the text when it is (liveOutputBox)
    const shown = card.querySelector(":scope > .result-live pre");
    if (shown) {
      shown.textContent = this.text(actionId);
      shown.scrollTop = shown.scrollHeight;
      return;
    }
    const pending = card.querySelector(":scope > .result-pending");
    if (pending) pending.replaceWith(liveOutputBox(this.text(actionId)));
  }
}

/** A running call's output so far, in place of its result. */
export function liveOutputBox(text) {
  return el("div", { class: "result result-live" },
    el("span", { class: "label", text: "Output so far" }),
    el("pre", { class: "output", text }));
}
