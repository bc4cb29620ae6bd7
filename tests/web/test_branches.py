"""Branches from the page: a head moved elsewhere shows without a reload, a message sent from
an earlier event starts a sibling branch, the tree view lists both heads and switches between
them, and forking from an event opens a new conversation holding the path up to it."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from support.canvas import open_conversation, screenshot
from support.server_process import ServerProcess
from treadle.client import TreadleClient
from treadle.runtime.settings import ConversationSettings


def user_texts(page: Page) -> list[str]:
    return page.locator(".item-message.from-user .text").all_inner_texts()


def test_switch_branch_tree_and_fork(
    page: Page, web_server: ServerProcess, web_client: TreadleClient, web_folder: Path
) -> None:
    settings = ConversationSettings.scripted_inline([], web_folder)
    conversation = web_client.create_conversation(settings, title="Branches")
    first = conversation.send_message("first")
    for text in ("second", "third"):
        conversation.send_message(text)
    open_conversation(page, web_server.base_url, conversation.id)
    expect(page.locator(".item-message.from-user")).to_have_count(3)

    conversation.switch_branch(first.id)  # elsewhere: another client moves the head
    expect(page.locator(".item-message.from-user")).to_have_count(1)
    assert user_texts(page) == ["first"]

    page.fill(".composer textarea", "another second")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator(".item-message.from-user")).to_have_count(2)
    assert user_texts(page) == ["first", "another second"]

    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.get_by_role("button", name="Branches", exact=True).click()
    tree = page.locator("#panel-body")
    expect(tree.locator("h3")).to_have_text("2 heads, 1 branch point")
    # drawn as a tree (SVG): two lanes, each ending at its head, the newer one joined to the
    # first at the branch point; the active path stands out
    expect(tree.locator("svg .tree-head")).to_have_count(2)
    expect(tree.locator("svg .tree-point")).to_have_count(1)
    expect(tree.locator("svg .tree-fork")).to_have_count(1)
    # one request for the whole tree (it was N+M+NxM). The side list's refresh (on a timer,
    # and after the send) is not the panel's and may land in between on a busy machine.
    side_list = f"{web_server.base_url}/api/conversations?"
    api_requests = [url for url in requests if "/api/" in url and not url.startswith(side_list)]
    assert api_requests == [f"{web_server.base_url}/api/conversations/{conversation.id}/tree"]
    active_head = tree.locator("svg .tree-head.active")
    expect(active_head).to_have_count(1)
    expect(active_head.locator("title")).to_contain_text("another second")
    expect(tree.locator("svg .tree-lane.on-path")).to_have_count(2)  # the first lane and the fork
    screenshot(page, "branches-tree")
    tree.locator("svg .tree-head:not(.active)").click()
    expect(tree.locator(".tree-pick")).to_contain_text("third")
    tree.locator(".tree-pick button.switch").click()
    expect(page.locator(".item-message.from-user")).to_have_count(3)
    assert user_texts(page) == ["first", "second", "third"]
    expect(tree.locator("svg .tree-head.active title")).to_contain_text("third")
    expect(tree.locator("svg .tree-lane.on-path")).to_have_count(1)

    page.get_by_role("button", name="Search", exact=True).click()
    search = page.locator(".search-form")
    search.locator("input[type=search]").fill("second")
    search.locator("label.kind", has_text="message").locator("input").check()
    search.locator("button[type=submit]").click()
    expect(page.locator("#panel-body .results li")).to_have_count(2)  # both branches
    expect(page.locator("#panel-body")).to_contain_text("2 matching events")
    search.locator("label", has_text="Active branch only").locator("input").check()
    search.locator("button[type=submit]").click()
    expect(page.locator("#panel-body .results li")).to_have_count(1)

    second = page.locator(".item-message.from-user", has_text="second")
    second.locator(".card-head").click()
    inspector = page.locator("#panel-body")
    expect(inspector.locator(".raw-json")).to_contain_text('"text": "second"')
    expect(inspector.locator(".children li")).to_have_count(1)  # "third"
    screenshot(page, "inspector")
    inspector.get_by_role("button", name="Fork from here").click()
    expect(page).not_to_have_url(f"{web_server.base_url}/#/c/{conversation.id}")
    expect(page.locator(".conversation-head .title")).to_have_text("fork of Branches")
    expect(page.locator(".item-message.from-user")).to_have_count(2)
    assert user_texts(page) == ["first", "second"]
    # the fork says where it came from, and its origin lists it
    lineage = page.locator(".lineage")
    expect(lineage).to_contain_text("Forked from")
    lineage.get_by_role("button").first.click()
    expect(page.locator(".conversation-head .title")).to_have_text("Branches")
    expect(page.locator(".lineage")).to_contain_text("1 fork: fork of Branches")
    screenshot(page, "fork-lineage")
