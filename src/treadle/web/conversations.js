// The conversation list (title, status, last activity; newest activity first) and the form
// that creates a conversation.
import { api, conversationPath } from "./api.js";
import { $, clear, el, relativeTime, toast } from "./dom.js";

const LIST_LIMIT = 200;

export async function refreshList(activeId, navigate) {
  const list = $("#conversation-list");
  let page;
  try {
    page = await api.get(`/api/conversations?limit=${LIST_LIMIT}`);
  } catch (error) {
    $("#list-note").textContent = error.message;
    return;
  }
  const items = [...page.items].sort((a, b) => b.updated_at.localeCompare(a.updated_at));
  clear(list).append(...items.map((view) => listItem(view, view.id === activeId, navigate)));
  $("#list-note").textContent = items.length ? "" : "No conversation yet: create one.";
  return items;
}

/** Shows `status` and `eventCount` in the list's entry for conversation `id` (if listed). */
export function updateListEntry(id, status, reason, eventCount) {
  for (const item of $("#conversation-list").querySelectorAll("li[data-conversation-id]")) {
    if (item.dataset.conversationId !== id) continue;
    const badge = item.querySelector(".status");
    badge.textContent = status.replaceAll("_", " ");
    badge.className = `status status-${status}`;
    badge.title = reason ?? "";
    item.querySelector(".events").textContent = `${eventCount.toLocaleString()} ev.`;
  }
}

/** The title, else where it was imported from, else a short id (both ends: imported ids
 * often share their beginning). */
export function conversationTitle(view) {
  if (view.title) return view.title;
  const path = view.metadata?.origin?.path;
  if (typeof path === "string" && path) return `Imported: ${path.split("/").filter(Boolean).pop()}`;
  return `Conversation ${view.id.slice(0, 8)}…${view.id.slice(-4)}`;
}

function listItem(view, active, navigate) {
  const title = conversationTitle(view);
  return el("li", { class: active ? "active" : "", dataset: { conversationId: view.id } },
    el("button", { type: "button", class: "conversation-link", title: view.id, onclick: () => navigate(view.id) },
      el("span", { class: "conversation-title", text: title }),
      el("span", { class: "conversation-meta" },
        el("span", { class: `status status-${view.status}`, text: view.status.replaceAll("_", " "), title: view.status_reason }),
        el("span", { class: "activity", text: relativeTime(view.updated_at), title: view.updated_at }),
        el("span", { class: "events", text: `${view.event_count.toLocaleString()} ev.` }))));
}

/** Wires the "New" button and its dialog; `created(view)` gets the new conversation. */
export function setUpCreate(created) {
  const dialog = $("#create-dialog");
  const form = $("#create-form");
  const kind = form.elements.model_kind;
  const showKind = () => {
    for (const label of form.querySelectorAll(".for-litellm")) label.hidden = kind.value !== "litellm";
    for (const label of form.querySelectorAll(".for-scripted")) label.hidden = kind.value !== "scripted";
  };
  kind.addEventListener("change", showKind);
  $("#new-conversation").addEventListener("click", () => {
    $("#create-error").textContent = "";
    showKind();
    dialog.showModal();
    form.elements.task.focus();
  });
  $("#create-cancel").addEventListener("click", () => dialog.close());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const task = form.elements.task.value.trim();
      const view = await api.post("/api/conversations", createBody(form.elements));
      dialog.close();
      form.reset();
      created(view);
      if (task) {
        // The conversation exists now: a failure below is told on its own screen.
        await api.post(conversationPath(view.id, "/messages"), { text: task });
        await api.post(conversationPath(view.id, "/run"), {});
      }
    } catch (error) {
      if (dialog.open) $("#create-error").textContent = error.message;
      else toast(error.message, "error");
    }
  });
}

function createBody(fields) {
  const value = (name) => fields[name].value.trim() || null;
  const model = fields.model_kind.value === "scripted"
    ? { kind: "scripted", responses: scriptedResponses(value("responses")) }
    : { kind: "litellm", model: value("model"), base_url: value("base_url") };
  return {
    title: value("title"),
    settings: { model, workspace: value("workspace"), confirmation: fields.confirmation.value },
  };
}

/** The scripted model's responses, inline: the server never reads a script file a client names. */
function scriptedResponses(text) {
  let parsed;
  try {
    parsed = JSON.parse(text ?? "[]");
  } catch (error) {
    throw new Error(`Responses: not valid JSON (${error.message})`);
  }
  const responses = Array.isArray(parsed) ? parsed : parsed?.responses;
  if (!Array.isArray(responses)) throw new Error('Responses: give a JSON list, or {"responses": [...]}');
  return responses;
}
