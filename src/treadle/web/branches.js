// The branch tree: branch points and heads of the conversation as nested lists, the active
// head marked; switch to any head, or inspect where a branch starts.
import { api, conversationPath, query } from "./api.js";
import { describeEvent } from "./cards.js";
import { el } from "./dom.js";

const MAX_NODES = 60; // beyond this the panel lists what it left out

export async function renderBranches(body, screen) {
  body.append(el("p", { class: "note", text: "Reading the tree…" }));
  try {
    const tree = await buildTree(screen.id);
    if (!screen.app.panel.isOpen("branches")) return; // the user moved on meanwhile
    body.replaceChildren(...treeView(tree, screen));
  } catch (error) {
    body.replaceChildren(el("p", { class: "error-text", text: error.message }));
  }
}

/** {head, heads: [{seq, event}], root: node}; a node is {start, point, nodes, heads}. */
async function buildTree(conversationId) {
  const path = (rest) => conversationPath(conversationId, rest);
  const get = (id) => api.get(path(`/events/${encodeURIComponent(id)}`));
  const shape = await api.get(path("/tree"));
  const heads = await Promise.all(shape.heads.slice(0, MAX_NODES).map(get));
  const points = await Promise.all(shape.branch_points.slice(0, MAX_NODES).map(async (id) => {
    const children = await api.get(path(`/events/${encodeURIComponent(id)}/children`));
    const starts = await Promise.all(children.filter((c) => c.kind !== "state_change").map((c) => get(c.id)));
    return { point: await get(id), starts };
  }));
  points.sort((a, b) => a.point.seq - b.point.seq);
  const root = { start: null, point: null, nodes: new Map(), heads: [] };
  for (const head of heads) {
    let node = root;
    for (const { point, start } of await choices(path, head, points)) {
      if (!node.nodes.has(start.event.id)) node.nodes.set(start.event.id, { start, point, nodes: new Map(), heads: [] });
      node = node.nodes.get(start.event.id);
    }
    node.heads.push(head);
  }
  const current = shape.head ? await get(shape.head) : null;
  return { shape, heads, root, current };
}

/** The branch taken at each branch point on the path of `head`, oldest first. */
async function choices(path, head, points) {
  const taken = [];
  for (const { point, starts } of points) {
    if (point.seq >= head.seq) break; // a parent is always appended before its children
    for (const start of starts) {
      if (start.seq > head.seq) continue;
      // Is the branch's first event on the head's path? A count of that one seq says so.
      const params = { branch_head: head.event.id, after_seq: start.seq - 1, before_seq: start.seq + 1 };
      const { count } = await api.get(path(`/events/count${query(params)}`));
      if (count) {
        taken.push({ point, start });
        break;
      }
    }
  }
  return taken;
}

function treeView(tree, screen) {
  const { shape, root, current } = tree;
  const parts = [
    el("h3", { text: `${plural(shape.heads.length, "head")}, ${plural(shape.branch_points.length, "branch point")}` }),
  ];
  if (current && !shape.heads.includes(current.event.id)) {
    parts.push(el("p", { class: "note", text: `The head is #${current.seq} ${describeEvent(current.event)}: not a leaf, so the next event starts a new branch there.` }));
  }
  if (shape.heads.length > MAX_NODES || shape.branch_points.length > MAX_NODES) {
    parts.push(el("p", { class: "note", text: `Showing the first ${MAX_NODES} heads and branch points.` }));
  }
  parts.push(el("ul", { class: "tree" }, nodeItems(root, screen, shape.head)));
  return parts;
}

function nodeItems(node, screen, activeHead) {
  const items = node.heads.map((head) => headItem(head, screen, activeHead));
  for (const child of node.nodes.values()) {
    items.push(el("li", { class: "branch" },
      el("div", { class: "branch-start" },
        el("span", { class: "fork-mark", text: "↳" }),
        el("button", {
          type: "button", class: "link", title: `a branch from #${child.point.seq}: its first event`,
          text: `at #${child.point.seq} → #${child.start.seq} ${describeEvent(child.start.event)}`,
          onclick: () => screen.inspect(child.start.event.id),
        })),
      el("ul", {}, nodeItems(child, screen, activeHead))));
  }
  return items;
}

function headItem(head, screen, activeHead) {
  const active = head.event.id === activeHead;
  return el("li", { class: `head${active ? " active" : ""}`, dataset: { headId: head.event.id } },
    el("button", { type: "button", class: "link", text: `#${head.seq} ${describeEvent(head.event)}`, onclick: () => screen.inspect(head.event.id) }),
    active ? el("span", { class: "chip chip-active", text: "active" })
      : el("button", { type: "button", class: "switch", text: "Switch here", onclick: () => screen.switchBranch(head.event.id) }),
  );
}

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}
