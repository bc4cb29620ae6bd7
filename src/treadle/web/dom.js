// Builds DOM nodes without ever parsing data as HTML: every string becomes a text node.
// Attributes come from an allow-list, so no caller can set a handler or a URL from data.

const ATTRIBUTES = new Set([
  "id", "title", "type", "role", "tabindex", "placeholder", "value", "name", "for", "open",
  "disabled", "checked", "hidden", "rows", "autocomplete", "aria-label", "aria-expanded",
  "aria-selected", "aria-live",
]);

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    setProp(node, name, value);
  }
  append(node, ...children);
  return node;
}

function setProp(node, name, value) {
  if (value === undefined || value === null || value === false) return;
  if (name === "class") node.className = value;
  else if (name === "text") node.textContent = String(value);
  else if (name === "dataset") Object.assign(node.dataset, value);
  else if (name.startsWith("on") && typeof value === "function") {
    node.addEventListener(name.slice(2), value);
  } else if (ATTRIBUTES.has(name)) {
    node.setAttribute(name, value === true ? "" : String(value));
  } else {
    throw new Error(`el(): attribute ${name} is not allowed`);
  }
}

const SVG_NS = "http://www.w3.org/2000/svg";
const SVG_ATTRIBUTES = new Set([
  "viewBox", "width", "height", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "d",
  "role", "tabindex", "aria-label", "text-anchor", "preserveAspectRatio",
]);

/** An SVG element, built as `el` builds HTML: text as text nodes, attributes from an
 * allow-list (no `href`, no handler from data). */
export function svg(tag, props = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.setAttribute("class", value);
    else if (name === "text") node.textContent = String(value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else if (SVG_ATTRIBUTES.has(name)) node.setAttribute(name, String(value));
    else throw new Error(`svg(): attribute ${name} is not allowed`);
  }
  append(node, ...children);
  return node;
}

export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

/** The first `limit` characters of a text, on one line, for labels. */
export function snippet(text, limit = 80) {
  const line = String(text ?? "").replace(/\s+/g, " ").trim();
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}

export function clockTime(timestamp) {
  const date = new Date(timestamp);
  if (Number.isNaN(date.getTime())) return String(timestamp ?? "");
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function relativeTime(timestamp) {
  const seconds = (Date.now() - new Date(timestamp).getTime()) / 1000;
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(timestamp).toLocaleDateString();
}

/** A short message at the bottom of the screen; errors stay longer. */
export function toast(message, kind = "info") {
  const item = el("div", { class: `toast toast-${kind}`, role: "status", text: message });
  $("#toasts").append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 3000);
}
