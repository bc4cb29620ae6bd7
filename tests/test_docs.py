"""The documentation stays true: links resolve inside the repository, every contract name the
code uses is documented, and the worked examples print what docs/contracts.md shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from treadle.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONTRACTS = DOCS / "contracts.md"
SEED = ROOT / "examples" / "seed"

WRITTEN_ELSEWHERE = {"docs/stream.md"}
"""Pages another part of issue 11 adds (the stream protocol); linked before they land. A missing
one is tolerated, an existing one is checked like any other page."""

CONTRACT_NAME = re.compile(r"\b[A-Z]{2,}(?:-[A-Z]+)+\b")
"""How a contract or report code is spelt: TREE-CYCLE, APPEND-DUP-ID, OPENHANDS-INDEX-GAP."""

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def links(text: str) -> list[str]:
    """Link targets of a Markdown text, outside code blocks and code spans."""
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    return INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of ``page``."""
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = INLINE_CODE.sub(lambda code: code.group(0).strip("`"), heading.group(1))
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            found.add(slug)
    return found


def link_problem(page: Path, target: str) -> str | None:
    """Why ``target``, linked from ``page``, is not a page of the repository; None when it is."""
    if re.match(r"https?://", target):
        host = re.match(r"https?://([^/:]+)", target)
        local = host is None or host.group(1) in {"localhost", "127.0.0.1", "0.0.0.0"}
        return "a link to a local server, not a public page" if local else None
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
        return "a link that is neither a file of the repository nor an http(s) page"
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / path_part).resolve() if path_part else page
    if not resolved.is_relative_to(ROOT):
        return "a link that leaves the repository"
    relative = resolved.relative_to(ROOT).as_posix()
    if not resolved.exists():
        return None if relative in WRITTEN_ELSEWHERE else f"{relative} does not exist"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"{relative} has no heading for #{anchor}"
    return None


def test_every_link_in_the_readme_and_docs_stays_in_the_repository_and_resolves():
    problems = [
        f"{page.relative_to(ROOT)}: ({target}) is {why}"
        for page in markdown_pages()
        for target in links(page.read_text(encoding="utf-8"))
        if (why := link_problem(page, target)) is not None
    ]
    assert problems == []


def test_the_link_check_finds_what_it_must_refuse(tmp_path):
    """Each kind of bad link is caught (so a clean run above means something)."""
    readme = ROOT / "README.md"
    text = (
        "[spec](../shared/SPEC.md) [gone](docs/nothing.md) [here](docs/contracts.md#no-such) "
        "[mail](mailto:a@b.c) [srv](http://127.0.0.1:8000/) `[code](../x.md)` [ok](docs/)"
    )
    found = {target: link_problem(readme, target) for target in links(text)}
    assert set(found) == {
        "../shared/SPEC.md",
        "docs/nothing.md",
        "docs/contracts.md#no-such",
        "mailto:a@b.c",
        "http://127.0.0.1:8000/",
        "docs/",
    }
    assert found["../shared/SPEC.md"] == "a link that leaves the repository"
    assert found["docs/nothing.md"] == "docs/nothing.md does not exist"
    assert "no heading" in found["docs/contracts.md#no-such"]
    assert "neither" in found["mailto:a@b.c"]
    assert "local server" in found["http://127.0.0.1:8000/"]
    assert found["docs/"] is None
    assert link_problem(readme, "docs/contracts.md#the-seeds-worked-examples") is None


def test_the_readme_links_the_documentation():
    targets = links((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "docs/README.md" in targets
    assert "docs/contracts.md" in targets
    index = links((DOCS / "README.md").read_text(encoding="utf-8"))
    for page in ("contracts.md", "architecture.md", "glossary.md", "stream.md"):
        assert page in index


def contract_names_in_code() -> dict[str, str]:
    """Every contract or report code named in src/treadle (errors raised, audit findings,
    report codes, docstrings), with one file that names it."""
    names: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "treadle").rglob("*")):
        if path.suffix in {".py", ".js", ".html"}:
            for name in CONTRACT_NAME.findall(path.read_text(encoding="utf-8")):
                names.setdefault(name, str(path.relative_to(ROOT)))
    return names


def test_every_contract_name_the_code_uses_is_in_the_contracts_page():
    documented = set(re.findall(r"`([A-Z]{2,}(?:-[A-Z]+)+)`", CONTRACTS.read_text("utf-8")))
    names = contract_names_in_code()
    # The names the core raises and reports are among them (the scan is not vacuous).
    assert {"TREE-CYCLE", "TREE-MISSING", "APPEND-DUP-ID", "PROJECT-DUP-CALL", "LINK-ID"} <= set(
        names
    )
    missing = {name: where for name, where in names.items() if name not in documented}
    assert missing == {}, "add these to docs/contracts.md"


# -- the worked examples print what the page shows --------------------------------------------


def console_examples() -> list[tuple[list[str], str]]:
    """(argv, the output the page shows) of every ``$ treadle ...`` in a console block."""
    examples = []
    text = CONTRACTS.read_text(encoding="utf-8")
    for block in re.findall(r"^```console\n(.*?)^```", text, re.S | re.M):
        for command in re.split(r"^(?=\$ )", block, flags=re.M):
            if not command.startswith("$ treadle "):
                continue
            line, _, shown = command.partition("\n")
            argv = shlex.split(line[2:].split("#")[0])[1:]
            examples.append((argv, shown.strip("\n")))
    return examples


def run_treadle(argv: list[str]) -> tuple[int, str]:
    here = Path.cwd()
    os.chdir(SEED)  # the page runs the commands from examples/seed/
    try:
        result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    finally:
        os.chdir(here)
    return result.exit_code, result.stdout


def test_the_contracts_page_shows_every_worked_example():
    commands = [" ".join(argv) for argv, _ in console_examples()]
    for expected in (
        "path 1_branches.jsonl --head new",
        "project 3_out_of_order.jsonl --raw",
        "project 2_parallel_calls.jsonl",
        "audit 3_out_of_order.jsonl",
        "audit 4a_missing_parent.jsonl --json",
        "audit 4b_cycle.jsonl --json",
        "audit 4c_dup_call_in_response.jsonl --json",
        "audit 4d_dup_call_across_responses.jsonl --json",
        "audit 4e_wrong_action.jsonl --json",
    ):
        assert expected in commands


@pytest.mark.parametrize(
    ("argv", "shown"), console_examples(), ids=lambda value: " ".join(value)[:60]
)
def test_a_worked_example_prints_what_the_contracts_page_shows(argv, shown):
    exit_code, output = run_treadle(argv)
    assert exit_code == (1 if argv[1].startswith("4") else 0), output
    if "--json" in argv and not shown.startswith("{"):
        # Abbreviated on the page: the keys shown must equal the report's.
        part = json.loads("{" + shown + "}")
        report = json.loads(output)
        assert {key: report[key] for key in part} == part
    else:
        lines = [line.rstrip() for line in output.strip("\n").splitlines()]
        assert lines == [line.rstrip() for line in shown.splitlines()]


def test_no_file_sends_its_reader_to_a_document_outside_the_repository():
    """SPEC.md and DESIGN.md lived beside the repository, not in it: a clone has docs/ only."""
    outside = re.compile(r"\b(?:SPEC|DESIGN)\.md\b|\.\./shared/")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    # What a clone holds (never build output such as src/*.egg-info, nor the venv).
    files = [ROOT / name for name in tracked.split("\0") if name and (ROOT / name).is_file()]
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text("utf-8", "replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert found == []
