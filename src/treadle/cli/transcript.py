"""A conversation's active path as a person reads it: who said what, each tool call with its
result beside it, long outputs folded; and the agent's final answer. One structure
(``Transcript``) drawn three ways: on the terminal (``treadle show``, the end of ``treadle run``),
as Markdown and as HTML (``treadle export markdown|html``).

Everything here is anyone's text (a model's, a tool's): the terminal gets it through
``visible`` (no escape sequence reaches it), Markdown in fences no content can close, HTML
escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from treadle.cli.terminal_text import visible

if TYPE_CHECKING:
    from treadle.events.model import ActionEvent, Event

FOLDED_LINES = 12
"""Lines of a call's output shown before the fold (``--full`` shows them all)."""
ARGUMENTS_CHARS = 300
"""Characters of a call's arguments shown before the fold."""
RESULT_KINDS = ("observation", "agent_error", "user_rejection")


@dataclass(frozen=True, slots=True)
class Block:
    """One thing the transcript shows. ``kind``: user, agent (Markdown), call (``title`` the
    call, ``body`` its result), note (a line about the run)."""

    kind: str
    title: str
    body: str = ""
    failed: bool = False
    hidden_lines: int = 0
    """Lines of ``body`` left out by the fold."""


def final_answer(path: Sequence[Event]) -> str | None:
    """What the agent answered last on the path: its ``finish`` message or its last text
    message, in full; None when the last user message got no answer yet."""
    for event in reversed(path):
        if event.kind == "observation" and event.tool_name == "finish" and not event.is_error:
            return event.content
        if event.kind == "message":
            if event.source == "agent":
                return event.text if event.text.strip() else None
            return None
    return None


def _call_title(action: ActionEvent) -> str:
    """``tool(the arguments that matter)``: a terminal's command, an editor's command and path."""
    arguments = action.arguments or {}
    if action.tool_name == "terminal" and isinstance(arguments.get("command"), str):
        return f"$ {arguments['command']}"
    if action.tool_name == "file_editor" and isinstance(arguments.get("path"), str):
        return f"file_editor {arguments.get('command', '?')} {arguments['path']}"
    if action.tool_name == "finish":
        return "finish"
    return f"{action.tool_name}({action.raw_arguments})"


def _fold(text: str, full: bool, limit: int = FOLDED_LINES) -> tuple[str, int]:
    lines = text.splitlines()
    if full or len(lines) <= limit:
        return text, 0
    return "\n".join(lines[:limit]), len(lines) - limit


def transcript(path: Sequence[Event], *, full: bool = False) -> list[Block]:
    """The blocks of ``path`` in order, each call followed by its result."""
    results: dict[str, Event] = {}
    for event in path:
        answered = getattr(event, "action_id", None) if event.kind in RESULT_KINDS else None
        if isinstance(answered, str):
            results.setdefault(answered, event)
    shown: set[str] = set()
    blocks: list[Block] = []
    for event in path:
        if event.id in shown:
            continue
        if event.kind == "message":
            blocks.append(Block("agent" if event.source == "agent" else "user", "", event.text))
        elif event.kind == "action":
            if event.thought:
                blocks.append(Block("agent", "", event.thought))
            if event.tool_name == "finish":
                continue  # its result is the answer, shown as the agent's words
            title = _call_title(event)
            if not full and len(title) > ARGUMENTS_CHARS:
                title = title[:ARGUMENTS_CHARS] + " …"
            result = results.get(event.id)
            if result is None:
                blocks.append(Block("call", title, "(no result on this path yet)"))
                continue
            shown.add(result.id)
            blocks.append(_result_block(title, result, full))
        elif event.kind == "observation" and event.tool_name == "finish":
            blocks.append(Block("agent", "", event.content))
        elif event.kind in ("observation", "agent_error", "user_rejection"):
            tool = getattr(event, "tool_name", "?")
            blocks.append(_result_block(f"{tool} (call not on this path)", event, full))
        elif event.kind == "condensation":
            blocks.append(
                Block(
                    "note",
                    f"condensed: {len(event.forgotten_event_ids)} earlier event(s) "
                    "leave the model's context",
                )
            )
        elif event.kind == "state_change" and event.key == "status":
            value = event.value if isinstance(event.value, dict) else {}
            status, reason = value.get("status"), value.get("reason")
            if status in ("error", "stuck", "paused", "waiting_for_confirmation"):
                blocks.append(Block("note", f"{status}" + (f": {reason}" if reason else "")))
        elif event.kind == "pause":
            blocks.append(Block("note", "paused"))
    return blocks


def _result_block(title: str, result: Event, full: bool) -> Block:
    if result.kind == "observation":
        text, hidden = _fold(result.content, full)
        return Block("call", title, text, result.is_error, hidden)
    if result.kind == "agent_error":
        text, hidden = _fold(result.error, full)
        return Block("call", title, text, True, hidden)
    reason = getattr(result, "reason", "")  # a user_rejection
    return Block("call", title, f"rejected: {reason}", True)


# -- the terminal ----------------------------------------------------------------------------


def answer_renderable(answer: str) -> RenderableType:
    """The final answer for the terminal: Markdown, whole, its control characters shown."""
    from rich.markdown import Markdown  # here: a log without an answer never loads it

    return Markdown(visible(answer))


def print_transcript(console: Console, blocks: Sequence[Block]) -> None:
    for block in blocks:
        console.print(_renderable(block))


def _renderable(block: Block) -> RenderableType:
    if block.kind == "user":
        return Group(Rule("user", align="left", style="bold"), Text(visible(block.body)))
    if block.kind == "agent":
        return Group(Rule("agent", align="left", style="bold green"), answer_renderable(block.body))
    if block.kind == "note":
        return Text(visible(f"· {block.title}"), style="yellow")
    head = Text("▶ ", style="cyan") + Text(visible(block.title), style="bold cyan")
    body = Text(visible(block.body), style="red" if block.failed else "dim")
    parts: list[RenderableType] = [head, Padding(body, (0, 0, 0, 2))]
    if block.hidden_lines:
        parts.append(
            Text(f"  … {block.hidden_lines} more line(s) (--full shows them)", style="dim")
        )
    return Group(*parts)


# -- Markdown and HTML -------------------------------------------------------------------------


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``: the content cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def to_markdown(title: str, blocks: Sequence[Block], answer: str | None) -> str:
    lines = [f"# {visible(title)}", ""]
    for block in blocks:
        body = visible(block.body)
        if block.kind in ("user", "agent"):
            lines += [f"## {block.kind}", "", body, ""]
        elif block.kind == "note":
            lines += [f"> {visible(block.title)}", ""]
        else:
            title_line = visible(block.title)
            fence = _fence(title_line)
            lines += [f"{fence}\n{title_line}\n{fence}", ""]
            fence = _fence(body)
            lines += [f"{fence}text\n{body}\n{fence}", ""]
            if block.hidden_lines:
                lines += [f"*… {block.hidden_lines} more line(s) not shown*", ""]
    if answer is not None:
        lines += ["## Final answer", "", visible(answer), ""]
    return "\n".join(lines)


_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
.user,.agent{white-space:pre-wrap;padding:.5rem 1rem;border-left:4px solid #888;margin:1rem 0}
.agent{border-color:#2a7}.call{margin:.5rem 0}.call pre{background:#f4f4f4;padding:.5rem;
overflow-x:auto}.failed pre{background:#fdecec}.note{color:#a60}h2{font-size:1rem}"""


def to_html(title: str, blocks: Sequence[Block], answer: str | None) -> str:
    """A self-contained page (no script, no remote resource), every text escaped."""

    def esc(text: str) -> str:
        return html.escape(visible(text), quote=True)

    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    for block in blocks:
        if block.kind in ("user", "agent"):
            parts.append(f'<h2>{block.kind}</h2><div class="{block.kind}">{esc(block.body)}</div>')
        elif block.kind == "note":
            parts.append(f'<p class="note">{esc(block.title)}</p>')
        else:
            failed = " failed" if block.failed else ""
            more = (
                f"<p><em>… {block.hidden_lines} more line(s) not shown</em></p>"
                if block.hidden_lines
                else ""
            )
            parts.append(
                f'<div class="call{failed}"><code>{esc(block.title)}</code>'
                f"<pre>{esc(block.body)}</pre>{more}</div>"
            )
    if answer is not None:
        parts.append(f'<h2>Final answer</h2><div class="agent">{esc(answer)}</div>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
