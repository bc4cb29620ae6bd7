// The branch tree, drawn as a tree (SVG) from the server's one /tree answer: each branch a lane
// from its first event to its head, joined to the lane it forks from at its branch point; the
// active path and the audit's marks stand out; pick a head or a point to switch or fork there.
import { api, conversationPath } from "./api.js";
import { describeEvent } from "./cards.js";
import { el, svg } from "./dom.js";

const MAX_NODES = 200; // beyond this the panel says what it left out
const LANE = 30; // px between lanes
const LEFT = 16; // px before depth 0
const RIGHT = 16; // px after the deepest head
const WIDTH = 360; // the drawing's width in px: the side panel's, depth scaled to fit

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
  if (!tree.branches.length) {
    parts.push(el("p", { class: "note", text: "No events yet: the tree starts with the first message." }));
    return parts;
  }
  const layout = lanes(tree.branches.slice(0, MAX_NODES));
  const details = el("div", { class: "tree-pick", role: "status" },
    el("p", { class: "note", text: "Pick a head (●) or a branch point (◆) to switch or fork there." }));
  const pick = (id, what) => details.replaceChildren(...picked(tree, id, what, screen));
  parts.push(drawing(tree, layout, screen, pick), details);
  return parts;
}

/** The lanes in drawing order: each root, then (depth first) the branches forking from it,
 * nearest the root first; with each lane's first and last depth and its place on the path. */
function lanes(branches) {
  const below = new Map(); // branch id -> branches hanging from it
  for (const branch of branches) {
    const key = branch.parent ?? "";
    if (!below.has(key)) below.set(key, []);
    below.get(key).push(branch);
  }
  const first = (branch) => branch.length - branch.own;
  for (const list of below.values()) list.sort((a, b) => first(a) - first(b) || a.head_seq - b.head_seq);
  const order = [];
  const visit = (branch) => {
    order.push(branch);
    for (const child of below.get(branch.id) ?? []) visit(child);
  };
  const known = new Set(branches.map((branch) => branch.id));
  // Roots, and branches whose parent was left out by MAX_NODES, start their own subtree.
  for (const branch of branches) if (!branch.parent || !known.has(branch.parent)) visit(branch);
  const lane = new Map(order.map((branch, index) => [branch.id, index]));
  const byId = new Map(branches.map((branch) => [branch.id, branch]));
  // The active path: the active branch whole, each lane above it up to where the next forks.
  const onPath = new Map(); // branch id -> the last depth of it on the active path
  for (let branch = branches.find((b) => b.active), until = null; branch; branch = byId.get(branch.parent)) {
    onPath.set(branch.id, until ?? branch.length - 1);
    until = first(branch) - 1;
  }
  return { order, lane, onPath, first };
}

function drawing(tree, layout, screen, pick) {
  const { order, lane, onPath, first } = layout;
  const deepest = Math.max(1, ...order.map((branch) => branch.length - 1));
  const step = (WIDTH - LEFT - RIGHT) / deepest;
  const x = (depth) => LEFT + depth * step;
  const y = (index) => LANE / 2 + index * LANE;
  const marked = (id) => screen.audit?.byEvent?.has(id) ?? false;
  const lines = [];
  const marks = [];
  for (const branch of order) {
    const row = y(lane.get(branch.id));
    const start = first(branch);
    const path = onPath.has(branch.id) ? " on-path" : "";
    if (branch.base && lane.has(branch.parent)) {
      // From the branch point on the parent's lane, down to this lane, then along it.
      const from = y(lane.get(branch.parent));
      const at = x(start - 1);
      lines.push(svg("path", { class: `tree-fork${path}`, d: `M${at},${from} V${row} H${x(start)}` }));
    }
    const end = branch.length - 1;
    const pathEnd = onPath.get(branch.id) ?? start - 1;
    if (pathEnd >= start) lines.push(svg("line", { class: "tree-lane on-path", x1: x(start), y1: row, x2: x(pathEnd), y2: row }));
    if (pathEnd < end) lines.push(svg("line", { class: "tree-lane", x1: x(Math.max(start, pathEnd)), y1: row, x2: x(end), y2: row }));
    const head = tree.events[branch.head];
    const label = `#${branch.head_seq} ${head ? describeEvent(head) : branch.head}`;
    marks.push(node("circle", {
      cx: x(branch.length - 1), cy: row, r: 6,
      class: `tree-head${branch.active ? " active" : ""}${pathEnd === end ? " on-path" : ""}${marked(branch.head) ? " marked" : ""}`,
      dataset: { headId: branch.head, branchId: branch.id },
    }, `${label} (${plural(branch.length, "event")}${branch.active ? ", active" : ""})`, () => pick(branch.head, "head")));
    marks.push(svg("text", {
      class: `tree-label${branch.active ? " active" : ""}`, x: Math.max(LEFT, x(start)), y: row - 9,
    }, clip(`#${branch.head_seq} · ${plural(branch.own, "event")}${branch.active ? " · active" : ""}`)));
  }
  for (const point of tree.points) {
    if (!lane.has(point.line)) continue;
    const cx = x(point.depth);
    const cy = y(lane.get(point.line));
    const event = tree.events[point.id];
    marks.push(node("path", {
      d: `M${cx},${cy - 6} L${cx + 6},${cy} L${cx},${cy + 6} L${cx - 6},${cy} Z`,
      class: `tree-point${marked(point.id) ? " marked" : ""}`,
      dataset: { pointId: point.id },
    }, `Branch point #${point.seq}: ${event ? describeEvent(event) : point.id} (${plural(point.children.length, "child", "children")})`, () => pick(point.id, "point")));
  }
  const height = Math.max(LANE, order.length * LANE);
  return el("div", { class: "tree-drawing" },
    svg("svg", { viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height, role: "img", "aria-label": "Branch tree" },
      ...lines, ...marks));
}

/** A clickable mark with a tooltip, reachable by keyboard (Tab, Enter). */
function node(tag, props, title, onPick) {
  const shape = svg(tag, { ...props, tabindex: 0, role: "button", "aria-label": title,
    onclick: onPick,
    onkeydown: (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); onPick(); } } },
  svg("title", { text: title }));
  return shape;
}

/** What can be done at the picked event: inspect it, switch to it, fork from it. */
function picked(tree, id, what, screen) {
  const event = tree.events[id];
  const active = tree.head === id;
  return [
    el("p", {}, el("strong", { text: what === "head" ? "Head: " : "Branch point: " }), event ? describeEvent(event) : id),
    el("div", { class: "buttons" },
      el("button", { type: "button", class: "quiet", text: "Inspect", onclick: () => screen.inspect(id) }),
      active ? el("span", { class: "chip chip-active", text: "active" })
        : el("button", { type: "button", class: "switch", text: "Switch here", onclick: () => screen.switchBranch(id) }),
      el("button", { type: "button", class: "fork", text: "Fork here", onclick: () => screen.fork(id) })),
  ];
}

function clip(text, limit = 48) {
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

function plural(count, noun, nouns = `${noun}s`) {
  return `${count} ${count === 1 ? noun : nouns}`;
}
