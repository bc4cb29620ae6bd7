// The active branch of a conversation as loaded so far: newest page first (paged by seq with
// before_seq), older pages on demand, live events appended when they continue the branch.
import { api, conversationPath, query } from "./api.js";
import { Timeline } from "./timeline.js";

export const FIRST_PAGE = 100;
export const OLDER_PAGE = 300;

export class Branch {
  constructor(conversationId, headId) {
    this.conversationId = conversationId;
    this.headId = headId;
    this.timeline = new Timeline();
    this.cursor = null;
    this.more = false;
  }

  async page(limit, beforeSeq) {
    const params = { branch_head: this.headId, order: "desc", limit, before_seq: beforeSeq };
    const page = await api.get(conversationPath(this.conversationId, `/events${query(params)}`));
    this.cursor = page.next_cursor;
    this.more = page.next_cursor !== null;
    return page.items.reverse();
  }

  async loadNewest() {
    if (!this.headId) {
      this.timeline.reset([]);
      return;
    }
    this.timeline.reset(await this.page(FIRST_PAGE));
  }

  async loadOlder() {
    if (!this.more) return false;
    this.timeline.prepend(await this.page(OLDER_PAGE, this.cursor));
    return true;
  }

  /**
   * A live event: "appended" when it continues this branch, "ignored" when it is no part of
   * it (a state change, one already here), "moved" when the head went elsewhere.
   */
  accept(entry) {
    const event = entry.event;
    if (event.kind === "state_change" || this.timeline.ids.has(event.id)) return { outcome: "ignored" };
    const parent = event.parent_id;
    const continues = this.headId
      ? parent === this.headId || (parent === undefined && this.timeline.tail?.id === this.headId)
      : parent === undefined || parent === "__root__";
    if (!continues) return { outcome: "moved" };
    this.headId = event.id;
    return { outcome: "appended", change: this.timeline.append(entry) };
  }
}
