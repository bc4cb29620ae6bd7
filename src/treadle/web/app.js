// The Canvas's entry point: the conversation list, the route (#/c/ID opens a conversation,
// #/e/ID an eval), the side panel and the connection indicator. Talks to the server's API only.
import { setUpKeyButton } from "./auth.js";
import { ConversationScreen } from "./conversation.js";
import { refreshList, setUpCreate } from "./conversations.js";
import { $, el } from "./dom.js";
import { EvalScreen, refreshEvalList } from "./evals.js";
import { Panel } from "./panel.js";

const LIST_REFRESH_MS = 5000;

class Canvas {
  constructor() {
    this.panel = new Panel();
    this.welcome = $("#welcome");
    this.screen = null;
    this.listTimer = 0;
    this.listQueued = false;
    setUpKeyButton();
    setUpCreate((view) => this.navigate(view.id));
    window.addEventListener("hashchange", () => this.route());
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !document.querySelector("dialog[open]")) this.panel.close();
    });
    setInterval(() => { if (!document.hidden) this.refreshList(); }, LIST_REFRESH_MS);
  }

  start() {
    this.route();
  }

  activeId() {
    return hashId(/^#\/c\/(.+)$/);
  }

  activeEvalId() {
    return hashId(/^#\/e\/(.+)$/);
  }

  navigate(id) {
    location.hash = `#/c/${encodeURIComponent(id)}`;
  }

  route() {
    const id = this.activeId();
    const evalId = this.activeEvalId();
    if (evalId === null && this.screen?.id === id && !(this.screen instanceof EvalScreen)) return;
    this.screen?.close();
    this.screen = null;
    this.panel.close();
    const main = $("#main");
    if (evalId !== null) {
      const screen = new EvalScreen(evalId);
      main.replaceChildren(screen.root);
      this.setConnection("offline");
      screen.open()
        .catch((error) => screen.root.append(el("p", { class: "error-text", text: error.message })))
        .finally(() => this.refreshList());
      return;
    }
    if (!id) {
      main.replaceChildren(this.welcome);
      this.setConnection("offline");
      this.refreshList();
      return;
    }
    this.screen = new ConversationScreen(this, id);
    main.replaceChildren(this.screen.root);
    // The list waits for the conversation's first screen: that is what the user came for.
    this.screen.open()
      .catch((error) => this.screen?.root.append(el("p", { class: "error-text", text: error.message })))
      .finally(() => this.refreshList());
  }

  async refreshList() {
    // Evals are listed from the home and eval screens only: opening a conversation costs no
    // extra request (treadle bench canvas counts them).
    if (this.activeId() === null) refreshEvalList(this.activeEvalId());
    const items = await refreshList(this.activeId(), (id) => this.navigate(id));
    const active = this.screen instanceof EvalScreen ? null : items?.find((view) => view.id === this.screen?.id);
    if (this.screen instanceof ConversationScreen && items) this.screen.showForks(items);
    if (active) {
      this.screen.viewRefreshed(active);
      this.screen.syncListEntry(active); // the list's copy may be older than the stream's
    }
  }

  /** Live events changed a conversation: refresh the list soon, at most once a second. */
  conversationChanged() {
    if (this.listQueued) return;
    this.listQueued = true;
    setTimeout(() => { this.listQueued = false; this.refreshList(); }, 1000);
  }

  setConnection(state, detail) {
    const badge = $("#connection");
    badge.textContent = state;
    badge.className = `connection connection-${state}`;
    badge.title = detail?.reason ? `Live stream: ${detail.reason} (code ${detail.code})` : "Live stream";
  }
}

/** The id the hash names under `pattern`, or null: a link whose escapes are malformed ("%")
 * names nothing (decodeURIComponent would throw, and the router with it). */
function hashId(pattern) {
  const match = location.hash.match(pattern);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return null;
  }
}

const canvas = new Canvas();
// For tests and the curious: the open screen, and a way to cut the live stream.
window.treadle = {
  get screen() { return canvas.screen; },
  dropStream: () => canvas.screen?.stream?.drop(),
};
canvas.start();
