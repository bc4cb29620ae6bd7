// The live event stream of one conversation over a WebSocket (docs/stream.md). After a drop it
// reconnects by itself and resumes after the last seq it saw, so no event is missed or shown
// twice. Status and head come in each event frame, as the server computed them.
import { conversationPath } from "./api.js";
import { apiKey, askForKey } from "./auth.js";

const MAX_BACKOFF_MS = 5000;
// 4400-4499 mirror HTTP's 4xx: "do not retry" (4400 bad parameter, 4403 refused, 4404 no
// such conversation), except 4401 (ask for the key), 4408 (reconnect) and 4429 (later).
// Anything else (1013 store unavailable, 1011 server error, a network drop) is retried.
const RETRYABLE_4XXX = new Set([4401, 4408, 4429]);
const HEALTHY_MS = 30000; // a connection open this long worked, even if it stayed quiet

/** Whether a close code says that reconnecting cannot help. */
export function isFinalClose(code) {
  return code >= 4400 && code <= 4499 && !RETRYABLE_4XXX.has(code);
}

export class EventStream {
  /**
   * @param {string} conversationId
   * @param {number} afterSeq events up to this seq are already known
   * @param {{onMessage: Function, onState: Function}} handlers `onState(state, detail)`:
   *   state is connecting, live, reconnecting, gone (4404), stopped (another final code)
   *   or offline; detail ({code, reason}) is why the last connection ended, when it said.
   */
  constructor(conversationId, afterSeq, handlers) {
    this.conversationId = conversationId;
    this.lastSeq = afterSeq;
    this.handlers = handlers;
    this.failures = 0;
    this.closed = false;
    this.timer = 0;
    this.openedAt = 0;
    this.connect(afterSeq);
  }

  connect(afterSeq) {
    const url = new URL(conversationPath(this.conversationId, "/events/stream"), location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("after_seq", String(afterSeq));
    url.searchParams.set("batch", "true");
    const socket = new WebSocket(url);
    this.socket = socket;
    this.handlers.onState("connecting");
    socket.addEventListener("open", () => this.opened(socket));
    socket.addEventListener("message", (message) => this.received(message));
    socket.addEventListener("close", (event) => this.lost(socket, event));
  }

  opened(socket) {
    // A browser cannot set headers on a WebSocket: the key goes in the first message.
    const key = apiKey();
    if (key) socket.send(JSON.stringify({ api_key: key }));
    // Opening is not working: a server whose store is out accepts, then closes (1013).
    // The backoff resets only once a connection delivers something or stays up.
    this.openedAt = Date.now();
    this.handlers.onState("live");
  }

  received(message) {
    // With batch=true a frame holds one message or an array of them (a catch-up).
    this.failures = 0;
    const frame = JSON.parse(message.data);
    for (const data of Array.isArray(frame) ? frame : [frame]) {
      // A transient frame ("stored": false) has no seq: live only, never a gap.
      if (data.type === "event" && data.stored !== false) {
        if (data.seq <= this.lastSeq) continue; // a replay of what was already seen
        this.lastSeq = data.seq;
      }
      this.handlers.onMessage(data);
    }
  }

  lost(socket, event) {
    if (this.closed || socket !== this.socket) return;
    if (event.code === 4401) {
      askForKey("The live stream needs an API key.").then(() => this.reconnect());
      return;
    }
    const detail = event.reason ? { code: event.code, reason: event.reason } : null;
    if (isFinalClose(event.code)) {
      this.closed = true; // for good: the server said retrying cannot help
      this.handlers.onState(event.code === 4404 ? "gone" : "stopped", { code: event.code, reason: event.reason });
      return;
    }
    if (this.openedAt && Date.now() - this.openedAt >= HEALTHY_MS) this.failures = 0;
    this.openedAt = 0;
    this.failures += 1;
    this.handlers.onState("reconnecting", detail);
    const delay = Math.min(MAX_BACKOFF_MS, 250 * 2 ** Math.min(this.failures, 5));
    this.timer = setTimeout(() => this.reconnect(), delay);
  }

  reconnect() {
    if (this.closed) return;
    // Every event frame carries the status and head after it, and with batch=true a
    // run_finished frame comes in the same message as its event: resume right after.
    this.connect(this.lastSeq);
  }

  /** Cuts the connection as a network drop would (the stream then resumes by itself). */
  drop() {
    this.socket?.close(4000, "dropped by the page");
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    this.socket?.close(1000, "page closed the stream");
    this.handlers.onState("offline");
  }
}
