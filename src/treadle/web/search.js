// Search the conversation's events by text and kind (optionally on the active branch only),
// newest first, page by page; a result opens in the inspector.
import { api, conversationPath, query } from "./api.js";
import { describeEvent } from "./cards.js";
import { el } from "./dom.js";

export const KINDS = [
  "message", "system_prompt", "action", "observation", "agent_error", "user_rejection",
  "condensation", "pause", "state_change", "foreign",
];
const PAGE = 50;

export function renderSearch(body, screen) {
  const state = screen.searchState ??= { text: "", kinds: [], branchOnly: false };
  const text = el("input", { type: "search", placeholder: "text in the event (any field)", value: state.text, "aria-label": "Search text" });
  const boxes = KINDS.map((kind) => {
    const box = el("input", { type: "checkbox", value: kind, checked: state.kinds.includes(kind) });
    return el("label", { class: "kind" }, box, kind);
  });
  const branchOnly = el("input", { type: "checkbox", checked: state.branchOnly });
  const results = el("ol", { class: "results" });
  const more = el("button", { type: "button", class: "quiet", hidden: true, text: "More results" });
  const count = el("p", { class: "note" });
  let cursor = null;

  const params = (before) => ({
    text: state.text || undefined,
    kinds: state.kinds,
    branch_head: state.branchOnly ? screen.branch.headId : undefined,
    order: "desc",
    limit: PAGE,
    before_seq: before,
  });
  const run = async (before) => {
    const page = await api.get(conversationPath(screen.id, `/events${query(params(before))}`));
    for (const { seq, event } of page.items) {
      results.append(el("li", {}, el("button", {
        type: "button", class: "link result-row", title: event.id,
        onclick: () => screen.inspect(event.id, { reveal: true }),
      }, el("span", { class: "seq", text: `#${seq}` }), el("span", { class: "kind-tag", text: event.kind }), describeEvent(event))));
    }
    cursor = page.next_cursor;
    more.hidden = cursor === null;
  };
  const submit = async (event) => {
    event.preventDefault();
    state.text = text.value.trim();
    state.kinds = boxes.map((label) => label.firstChild).filter((box) => box.checked).map((box) => box.value);
    state.branchOnly = branchOnly.checked;
    results.replaceChildren();
    count.textContent = "Searching…";
    try {
      const counting = { ...params(), order: undefined, limit: undefined };
      const [found] = await Promise.all([
        api.get(conversationPath(screen.id, `/events/count${query(counting)}`)),
        run(undefined),
      ]);
      count.textContent = `${found.count.toLocaleString()} matching events`;
    } catch (error) {
      count.textContent = error.message;
    }
  };
  more.addEventListener("click", () => run(cursor).catch((error) => { count.textContent = error.message; }));
  const form = el("form", { class: "search-form", onsubmit: submit },
    text,
    el("fieldset", { class: "kinds" }, el("legend", { text: "Kinds (none = all)" }), boxes),
    el("label", {}, branchOnly, "Active branch only"),
    el("button", { type: "submit", text: "Search" }),
  );
  body.append(form, count, results, more);
  text.focus();
}
