"""``treadle replay``: a recorded conversation replayed from its recording (``--mode
recorded``, REPLAY-RECORDED) or with its tools run again (``--mode rerun``, REPLAY-RERUN) —
docs/replay.md.

Exit codes (README, "The command line"): 0 the replay is the same; 1 it diverges (each
divergence is listed); 2 bad input (an unknown conversation or event, no starting files, a
sandbox that cannot start).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from treadle.cli.ids import resolve_conversation, resolve_event
from treadle.cli.output import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, fail, print_json
from treadle.cli.root import app
from treadle.cli.run_commands import SandboxKind, network_option
from treadle.cli.store_options import StoreOption, open_existing_store
from treadle.errors import TreadleError

if TYPE_CHECKING:  # the rest is imported by the command that uses it (cli/root.py)
    from treadle.runtime.replay import Divergence, ReplayReport

SHOWN_CHARS = 300
"""An expected or actual value is cut to this many characters in the text output."""


class ReplayMode(StrEnum):
    recorded = "recorded"
    rerun = "rerun"


@app.command("replay")
def replay(
    conversation: Annotated[
        str, typer.Argument(help="The conversation: its id or a unique prefix")
    ],
    mode: Annotated[
        ReplayMode,
        typer.Option(
            "--mode",
            help="recorded: feed the recorded responses and results, expect the same events; "
            "rerun: run the tools again into a new conversation, compare each result",
        ),
    ],
    head: Annotated[
        str | None,
        typer.Option("--head", help="Replay the path up to this event (default: the head)"),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="rerun: the starting files, when the conversation has no first snapshot "
            "(copied; the folder is not changed)",
        ),
    ] = None,
    into: Annotated[
        Path | None,
        typer.Option(
            "--into",
            help="rerun: the new conversation's workspace, absent or empty (default: a new "
            "folder in the temp folder, kept)",
        ),
    ] = None,
    sandbox: Annotated[
        SandboxKind,
        typer.Option(
            "--sandbox",
            help="rerun: the least isolation allowed; a recording that ran with less (an "
            "imported log saying none) reruns under this",
        ),
    ] = SandboxKind.bubblewrap,
    network: Annotated[
        str,
        typer.Option(
            "--network",
            help="rerun: the most network allowed (off, on, allow=HOST[:PORT],...)",
            callback=network_option,
        ),
    ] = "off",
    mount_ro: Annotated[
        list[Path] | None,
        typer.Option(
            "--mount-ro",
            help="rerun: a host path the sandbox may show read-only (repeatable); a recorded "
            "mount not given here is left out",
        ),
    ] = None,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Replay CONVERSATION: exit 0 when the replay is the same, 1 when it diverges."""
    from pydantic import ValidationError

    from treadle.environment import shell_environment
    from treadle.runtime.replay import replay_recorded
    from treadle.runtime.replay.rerun_mode import rerun
    from treadle.runtime.settings import HostProvides, SandboxSettings, SettingsPolicy
    from treadle.store.urls import default_store_dir

    if mode is ReplayMode.recorded and (workspace is not None or into is not None):
        fail("--workspace and --into apply to --mode rerun only", EXIT_BAD_INPUT)
    opened = open_existing_store(store)
    try:
        conversation = resolve_conversation(opened, conversation)
        if head is not None:
            head = resolve_event(opened, conversation, head)
        if mode is ReplayMode.recorded:
            report = replay_recorded(opened, conversation, head)
        else:
            policy = SettingsPolicy(
                provides=HostProvides(
                    snapshot_data_dir=default_store_dir(), shell_environment=shell_environment()
                )
            )
            try:
                allowed = SandboxSettings(
                    kind=sandbox.value,
                    network=network,
                    mounts_ro=tuple(str(path.resolve()) for path in mount_ro or ()),
                )
            except ValidationError as error:
                fail(f"--sandbox/--mount-ro: {error.errors()[0]['msg']}", EXIT_BAD_INPUT)
            report = rerun(
                opened,
                conversation,
                head,
                workspace=workspace,
                into=into,
                policy=policy,
                allowed=allowed,
            )
    except TreadleError as error:  # unknown conversation or event, no starting files, ...
        fail(str(error), EXIT_BAD_INPUT)
    finally:
        opened.close()
    if as_json:
        print_json(report.to_json())
    else:
        typer.echo("\n".join(report_lines(report)))
    raise typer.Exit(EXIT_OK if report.same else EXIT_VIOLATIONS)


def report_lines(report: ReplayReport) -> list[str]:
    """The report as text: a summary line, the actions of a rerun, each divergence."""
    verdict = "same" if report.same else f"{len(report.divergences)} divergence(s)"
    lines = [
        f"replay ({report.mode}) of {report.conversation} up to {report.head}: "
        f"{report.recorded_events} events recorded, {report.replayed_events} replayed: {verdict}"
    ]
    if report.new_conversation:
        lines.append(
            f"the rerun is conversation {report.new_conversation} (workspace "
            f"{report.workspace}, files from {report.starting_files})"
        )
        for check in report.actions:
            mark = "same     " if check.same else "DIFFERENT"
            lines.append(f"  {mark} {check.action_id} {check.tool_call_id} {check.tool}")
    lines += [line for divergence in report.divergences for line in _divergence_lines(divergence)]
    if report.mode == "rerun":
        if report.file_changes is None:
            lines.append("files: no recorded last snapshot to compare with")
        else:
            lines.append(
                f"files at the end against the recorded last snapshot: "
                f"{len(report.file_changes)} changed"
            )
            lines += [f"  {change['status']} {change['path']}" for change in report.file_changes]
    return lines


def _divergence_lines(divergence: Divergence) -> list[str]:
    where = divergence.event_id or f"(new {divergence.replayed_event_id})"
    call = ""
    if divergence.tool_call_id:
        call = f", call {divergence.tool_call_id}, tool {divergence.tool}"
    lines = [f"{divergence.contract} {where} ({divergence.kind}{call}): {divergence.message}"]
    if divergence.expected is not None:
        lines.append(f"  expected: {_shown(divergence.expected)}")
    if divergence.actual is not None:
        lines.append(f"  actual:   {_shown(divergence.actual)}")
    return lines


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
