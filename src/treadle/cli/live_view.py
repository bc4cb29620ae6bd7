"""One readable line per event, for live runs and logs: what happened, not the raw JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from treadle.cli.terminal_text import visible

if TYPE_CHECKING:
    from treadle.events.model import Event
    from treadle.store.base import StoredEvent

_STYLES = {
    "system_prompt": "dim",
    "message": "bold",
    "action": "cyan",
    "observation": "green",
    "agent_error": "red",
    "user_rejection": "magenta",
    "condensation": "yellow",
    "pause": "yellow",
    "state_change": "dim",
    "foreign": "dim",
}


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def describe(event: Event) -> str:
    """A short human summary of ``event``, safe on a terminal (its control characters, a
    tool's escape sequences among them, made visible)."""
    return visible(_describe(event))


def _describe(event: Event) -> str:
    from treadle.data.mcp import MCP_SERVERS_KEY, mcp_servers_text
    from treadle.data.model_change import MODEL_KEY, model_change_text

    if event.kind == "message":
        skills = (
            f"  [skills: {', '.join(event.activated_skills)}]" if event.activated_skills else ""
        )
        return f"{event.role}: {_one_line(event.text)}{skills}"
    if event.kind == "system_prompt":
        skills = f", skills: {', '.join(event.skills)}" if event.skills else ""
        return f"system prompt ({len(event.tools)} tools{skills})"
    if event.kind == "action":
        thought = f"  [{_one_line(event.thought, 60)}]" if event.thought else ""
        return f"{event.tool_name}({_one_line(event.raw_arguments, 70)}) call={event.tool_call_id}{thought}"
    if event.kind == "observation":
        return f"{event.tool_name} -> {_one_line(event.content)} (call={event.tool_call_id})"
    if event.kind == "agent_error":
        return f"{event.tool_name} error: {_one_line(event.error)} (call={event.tool_call_id})"
    if event.kind == "user_rejection":
        return f"{event.tool_name} rejected: {_one_line(event.reason)} (call={event.tool_call_id})"
    if event.kind == "condensation":
        said = "with a summary" if event.summary is not None else (event.note or "no summary")
        return (
            f"condensation: forgets {len(event.forgotten_event_ids)} events, {_one_line(said, 80)}"
        )
    if event.kind == "state_change":
        if event.key == "skills":
            told = _skills_line(event.value)
            if told is not None:
                return told
        if event.key == MODEL_KEY:
            told = model_change_text(event.value)
            if told is not None:
                return told
        if event.key == MCP_SERVERS_KEY:
            told = mcp_servers_text(event.value)
            if told is not None:
                return told
        return f"{event.key} = {_one_line(str(event.value), 80)}"
    if event.kind == "foreign":
        return f"foreign {event.foreign_kind}"
    return event.kind


def _skills_line(value: Any) -> str | None:
    """The ``skills`` fact in words, each skipped file with its reason in full (the user
    must be able to find and fix it); None for a value of another shape (e.g. imported)."""
    try:
        loaded = ", ".join(str(item["name"]) for item in value["loaded"]) or "none"
        skipped = "; ".join(f"{item['source']}: {item['error']}" for item in value["skipped"])
    except (KeyError, TypeError):
        return None
    return f"skills loaded: {loaded}" + (f"; skipped {skipped}" if skipped else "")


def render(stored: StoredEvent) -> Text:
    event = stored.event
    line = Text(f"{stored.seq:>5} ", style="dim")
    line.append(f"{event.kind:<15}", style=_STYLES.get(event.kind, ""))
    line.append(describe(event))
    return line


class LiveView:
    """An event callback printing each stored event as it happens."""

    def __init__(self, console: Console | None = None, *, show_state: bool = True) -> None:
        self.console = console or Console(highlight=False)
        self.show_state = show_state

    def __call__(self, stored: StoredEvent) -> None:
        if stored.event.kind == "state_change" and not self.show_state:
            return
        self.console.print(render(stored))
