"""Scoring an attempt on a clean checkout, as the SWE-bench harness does: the agent's patch
applied to a copy of the starting files the agent never touched, the task's hidden files
(``hidden_files``, ``test_patch``: the agent never saw them) laid on top, then ``verify`` run
there in a fresh sandbox. What the agent left in its workspace and not in its patch (files
behind its own ignore file, a nested repository, a test it rewrote) plays no part.

With ``fail_to_pass`` / ``pass_to_pass``, ``verify`` is a pytest-style runner: it is given
``-rA`` and the test ids, and each test's outcome is read from its short summary
(``PASSED id``, ``FAILED id - ...``); the task passes when every listed test passed,
whatever the runner's exit code.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treadle.data.settings import SandboxSettings
from treadle.eval.commands import OUTPUT_TAIL_CHARS, CommandResult, run_task_command
from treadle.eval.tasks import EvalTask
from treadle.eval.workspace import (
    MAX_PATCH_BYTES,
    AttemptFolder,
    Patch,
    WorkspaceSetupError,
    apply_patch,
)

TEST_OUTPUT_CHARS = 4 * 1024 * 1024
"""How much of a test runner's output is read for the tests' outcomes (its end: the summary)."""
PASSING_OUTCOMES = frozenset({"PASSED", "XFAIL"})
OUTCOMES = ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS", "SKIPPED")


@dataclass
class Score:
    """How the patch fared on the clean checkout: ``passed`` (before the conversation's status
    is considered), why not (``reason``), the verify command's result and each listed test's
    outcome."""

    passed: bool
    reason: str | None = None
    verify: CommandResult | None = None
    tests: dict[str, dict[str, str]] | None = None
    details: dict[str, Any] = field(default_factory=dict)


def score_attempt(
    folder: AttemptFolder,
    task: EvalTask,
    patch: Patch,
    sandbox: SandboxSettings,
    *,
    timeout_s: float,
    environment: Mapping[str, str] | None = None,
) -> Score:
    """Apply ``patch`` to ``folder.clean``, lay the task's hidden files on top and verify
    there (see the module docstring)."""
    details: dict[str, Any] = {
        "checkout": "clean",
        "hidden_files": task.hidden_files is not None,
        "test_patch": task.test_patch is not None,
    }
    if patch.too_large:
        return Score(
            False,
            f"the patch is over {MAX_PATCH_BYTES} bytes (MAX_PATCH_BYTES): it was not kept, "
            "so it cannot be applied",
            details=details,
        )
    touched = protected_paths_touched(task.protected, patch.touched)
    if touched:
        details["protected_touched"] = touched
        return Score(
            False,
            f"the patch touches protected path(s): {', '.join(touched[:10])}",
            details=details,
        )
    if patch.text:
        try:
            apply_patch(folder, patch.text, "agent.patch")
        except WorkspaceSetupError as error:
            return Score(
                False,
                f"the patch does not apply to the starting files: {error}",
                details=details,
            )
    if task.hidden_files is not None:
        lay_over(Path(task.hidden_files), folder.clean)
    if task.test_patch:
        try:
            apply_patch(folder, task.test_patch, "test.patch")
        except WorkspaceSetupError as error:
            return Score(
                False,
                f"the task's test_patch does not apply after the agent's patch: {error}",
                details=details,
            )
    ids = [*(task.fail_to_pass or ()), *(task.pass_to_pass or ())]
    command = task.verify
    if ids:
        command = f"{task.verify} -rA " + " ".join(shlex.quote(test) for test in ids)
    verify = run_task_command(
        folder.clean,
        command,
        sandbox,
        timeout_s=timeout_s,
        environment=environment,
        tail_chars=TEST_OUTPUT_CHARS if ids else OUTPUT_TAIL_CHARS,
    )
    if not ids:
        passed = verify.exit_code == 0
        reason = None if passed else f"verify exited {verify.exit_code}"
        return Score(passed, reason, verify, details=details)
    outcomes = read_test_outcomes(verify.output_tail, ids)
    tests = {
        "fail_to_pass": {test: outcomes[test] for test in task.fail_to_pass or ()},
        "pass_to_pass": {test: outcomes[test] for test in task.pass_to_pass or ()},
    }
    failing = [test for test in ids if outcomes[test] not in PASSING_OUTCOMES]
    reason = None
    if failing:
        named = ", ".join(f"{test} ({outcomes[test]})" for test in failing[:5])
        more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        reason = f"{len(failing)} of {len(ids)} listed test(s) did not pass: {named}{more}"
    trimmed = CommandResult(
        verify.exit_code, verify.output_tail[-OUTPUT_TAIL_CHARS:], verify.seconds, verify.timed_out
    )
    return Score(not failing, reason, trimmed, tests, details)


def protected_paths_touched(protected: tuple[str, ...], touched: tuple[str, ...]) -> list[str]:
    """The paths of ``touched`` that are, or lie in, a protected path."""
    hits = []
    for name in touched:
        for path in protected:
            if name == path or name.startswith(path.rstrip("/") + "/"):
                hits.append(name)
                break
    return hits


def read_test_outcomes(output: str, ids: list[str]) -> dict[str, str]:
    """Each test id's outcome in a pytest ``-rA`` short summary (``missing`` when it is not
    there: never collected, or the runner died first). Ids are matched whole, so that one
    with spaces (a parametrized test) is read right."""
    wanted = set(ids)
    found: dict[str, str] = {}
    for line in output.splitlines():
        outcome, _, rest = line.partition(" ")
        if outcome not in OUTCOMES:
            continue
        test = rest if rest in wanted else rest.split(" - ", 1)[0]
        if test in wanted:
            found[test] = outcome
    return {test: found.get(test, "missing") for test in ids}


def lay_over(source: Path, target: Path) -> None:
    """Copy the folder ``source`` over ``target``, its files replacing what is there. Never
    through a link in ``target`` (the agent's patch may have made ``tests`` a link to
    ``/etc``): a link or file where a folder of ``source`` goes is replaced by the folder."""
    if not source.is_dir():
        raise WorkspaceSetupError(f"hidden_files {source} is not a folder on this machine")
    for entry in sorted(source.iterdir()):
        destination = target / entry.name
        if entry.is_dir() and not entry.is_symlink():
            if destination.is_symlink() or (destination.exists() and not destination.is_dir()):
                destination.unlink()
            destination.mkdir(exist_ok=True)
            lay_over(entry, destination)
            continue
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        elif destination.exists() or destination.is_symlink():
            destination.unlink()
        shutil.copy2(entry, destination, follow_symlinks=False)
