// The side panel: one tab at a time (inspect, search, branches, audit), filled by the open
// conversation; Escape closes it.
import { $, clear } from "./dom.js";

export class Panel {
  constructor() {
    this.aside = $("#panel");
    this.body = $("#panel-body");
    this.tab = null;
    this.onTab = null;
    for (const button of this.aside.querySelectorAll("[data-tab]")) {
      button.addEventListener("click", () => this.onTab?.(button.dataset.tab));
    }
    $("#panel-close").addEventListener("click", () => this.close());
  }

  /** Shows tab `name` and returns its emptied body to fill. */
  open(name) {
    this.tab = name;
    this.aside.hidden = false;
    for (const button of this.aside.querySelectorAll("[data-tab]")) {
      const selected = button.dataset.tab === name;
      button.classList.toggle("active", selected);
      button.setAttribute("aria-selected", String(selected));
    }
    return clear(this.body);
  }

  isOpen(name) {
    return !this.aside.hidden && this.tab === name;
  }

  close() {
    this.aside.hidden = true;
    this.tab = null;
    clear(this.body);
  }
}
