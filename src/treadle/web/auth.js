// The API key for this tab: asked for when the server answers 401, kept in sessionStorage
// (never localStorage: the key should not outlive the tab).
import { $ } from "./dom.js";

const STORAGE_KEY = "treadle.apiKey";
let pending = null;

export function apiKey() {
  return sessionStorage.getItem(STORAGE_KEY) || "";
}

export function forgetKey() {
  sessionStorage.removeItem(STORAGE_KEY);
}

/** Shows the key dialog (once, however many requests wait) and resolves with the new key. */
export function askForKey(message) {
  if (pending) return pending;
  const dialog = $("#key-dialog");
  $("#key-message").textContent = message;
  $("#key-input").value = "";
  pending = new Promise((resolve) => {
    const form = $("#key-form");
    const submit = (event) => {
      event.preventDefault();
      const key = $("#key-input").value.trim();
      if (!key) return;
      sessionStorage.setItem(STORAGE_KEY, key);
      form.removeEventListener("submit", submit);
      dialog.close();
      pending = null;
      $("#key-button").hidden = false;
      resolve(key);
    };
    form.addEventListener("submit", submit);
    // Escape would leave every request waiting: the dialog stays until a key is given.
    dialog.addEventListener("cancel", (event) => event.preventDefault(), { once: true });
    dialog.showModal();
    $("#key-input").focus();
  });
  return pending;
}

export function setUpKeyButton() {
  const button = $("#key-button");
  button.hidden = !apiKey();
  button.addEventListener("click", () => {
    forgetKey();
    askForKey("Enter the API key to use from now on.");
  });
}
