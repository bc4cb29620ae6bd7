"""The Canvas shows which workspace skills the runtime added: folded under the system prompt
(AGENTS.md) and under the user message whose words triggered one, their text on demand."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.events.model import MessageEvent, SystemPromptEvent
from treadle.store.urls import open_store


def test_skills_are_shown_folded_on_their_events(page: Page, web_server: ServerProcess) -> None:
    system = SystemPromptEvent(
        text="You are an agent.", context="Run make check before you finish.", skills=("agents",)
    )
    asked = MessageEvent(
        source="user",
        text="build the docker image",
        activated_skills=("docker",),
        extended_content=("Use slim base images.",),
        parent_id=system.id,
    )
    answer = MessageEvent(source="agent", text="Built.", parent_id=asked.id)
    store = open_store(web_server.store_url)
    try:
        info = store.create_conversation(title="Skills")
        store.append_batch(info.id, [system, asked, answer])
    finally:
        store.close()
    open_conversation(page, web_server.base_url, info.id)
    user_skills = page.locator(".item-message.from-user .skills")
    expect(user_skills.locator("summary")).to_have_text("Skills: docker")
    expect(page.locator(".item-message.from-agent .skills")).to_have_count(0)
    user_skills.locator("summary").click()
    expect(user_skills.locator(".text")).to_have_text("Use slim base images.")
    page.locator(".item-system > summary").click()
    system_skills = page.locator(".item-system .skills")
    expect(system_skills.locator("summary")).to_have_text("Skills: agents")
    system_skills.locator("summary").click()
    expect(system_skills.locator(".text")).to_have_text("Run make check before you finish.")
    screenshot(page, "skills")
