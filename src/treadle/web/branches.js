// The branch tree, drawn from the server's one /tree answer: each branch a box holding its
// head, the branches forking from it nested inside with a connector; switch to any head.
import { api, conversationPath } from "./api.js";
import { describeEvent } from "./cards.js";
import { el } from "./dom.js";

const MAX_NODES = 200; // beyond this the panel says what it left out

export async function renderBranches(body, screen) {
  body.append(el("p", { class: "note", text: "Reading the tree…" }));
  try {
    // One request: the server's branch summary (heads, branches, points and their events).
    const tree = await api.get(conversationPath(screen.id, "/tree"));
    if (!screen.app.panel.isOpen("branches")) return; // the user moved on meanwhile
    body.replaceChildren(...treeView(tree, screen));
  } catch (error) {
    body.replaceChildren(el("p", { class: "error-text", text: error.message }));
  }
}

function treeView(tree, screen) {
  const parts = [
    el("h3", { text: `${plural(tree.heads.length, "head")}, ${plural(tree.branch_points.length, "branch point")}` }),
  ];
  const current = tree.head ? tree.events[tree.head] : null;
  if (current && !tree.heads.includes(tree.head)) {
    parts.push(el("p", { class: "note", text: `The head is ${describeEvent(current)}: not a leaf, so the next event starts a new branch there.` }));
  }
  if (tree.branches.length > MAX_NODES) {
    parts.push(el("p", { class: "note", text: `Showing ${MAX_NODES} of ${tree.branches.length} branches.` }));
  }
  const shown = tree.branches.slice(0, MAX_NODES);
  const below = new Map(); // branch id -> the branches hanging from it, oldest fork first
  for (const branch of shown) {
    const key = branch.parent ?? "";
    if (!below.has(key)) below.set(key, []);
    below.get(key).push(branch);
  }
  const depth = new Map(tree.points.map((point) => [point.id, point.depth]));
  for (const list of below.values()) list.sort((a, b) => (depth.get(a.base) ?? -1) - (depth.get(b.base) ?? -1));
  parts.push(el("div", { class: "branch-tree" }, (below.get("") ?? []).map((b) => branchBox(b, tree, below, depth, screen))));
  return parts;
}

/** A branch as a box: its head (switch or inspect), and inside it the branches forking from it,
 *  each joined to it by a connector labelled with the event it forks at. */
function branchBox(branch, tree, below, depth, screen) {
  const head = tree.events[branch.head];
  const forks = (below.get(branch.id) ?? []).map((child) =>
    el("div", { class: "fork" },
      el("div", { class: "fork-link", title: `forks at event ${child.base}` },
        el("span", { class: "fork-mark", text: "↳" }),
        el("button", {
          type: "button", class: "link", text: `at depth ${(depth.get(child.base) ?? 0) + 1}`,
          onclick: () => screen.inspect(child.base),
        })),
      branchBox(child, tree, below, depth, screen)));
  return el("div", { class: `branch-box${branch.active ? " active" : ""}`, dataset: { branchId: branch.id } },
    el("div", { class: `head${branch.active ? " active" : ""}`, dataset: { headId: branch.head } },
      el("button", {
        type: "button", class: "link", title: `${branch.length} events from the root, ${branch.own} on this branch`,
        text: `#${branch.head_seq} ${head ? describeEvent(head) : branch.head}`,
        onclick: () => screen.inspect(branch.head),
      }),
      el("span", { class: "chip", text: plural(branch.length, "event") }),
      branch.active ? el("span", { class: "chip chip-active", text: "active" })
        : el("button", { type: "button", class: "switch", text: "Switch here", onclick: () => screen.switchBranch(branch.head) })),
    forks.length ? el("div", { class: "forks" }, forks) : null);
}

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}
