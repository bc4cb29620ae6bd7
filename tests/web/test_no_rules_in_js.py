"""The Canvas mirrors the server's views: no JS module it loads batches calls, pairs results
with calls (by tool_call_id or action_id), resolves the legacy parent rule, or steps one seq back
to recover status, or adds up usage totals (docs/stream.md); nor renames the server's item types,
decides what a condensation folds, tells a call waiting or running from the status, counts the
runs without a sandbox, or refetches the transcript for a live frame (the frame says what
changed)."""

from __future__ import annotations

import re
from pathlib import Path

import treadle.web

WEB = Path(treadle.web.__file__).parent
IMPORT = re.compile(r"""(?:import|from)\s*(?:[^"';]*?from\s*)?["']\./([\w.]+\.js)["']""")

RULES = {
    "pairs results by id": re.compile(r"\.(?:get|set|has)\([^)]*\b(?:tool_call_id|action_id)\b"),
    "batches calls by response": re.compile(
        r"(?:===|!==)[^;\n]*\bllm_response_id\b|\bllm_response_id\b[^;\n]*(?:===|!==)"
    ),
    # Resolving: an absent parent combined with what came before (the inspector may still
    # say what the stored field holds, as the event's JSON does).
    "applies the legacy parent rule": re.compile(
        r"\bparent(?:_id)?\s*===\s*undefined\s*(?:&&|\|\|)|\|\|\s*parent(?:_id)?\s*===\s*[\"']__root__"
    ),
    "names kinds to batch or link": re.compile(r"\b(?:RESULT_KINDS|INVISIBLE_KINDS)\b"),
    "reconnects one seq back": re.compile(r"lastSeq\s*-\s*1"),
    # Usage totals are the server's (each frame's ``usage``): never summed from events here.
    "sums model calls' usage": re.compile(
        r"\bUSAGE_KINDS\b|\b(?:prompt_tokens|completion_tokens|cost_usd)\s*=[^;\n]*\+[^;\n]*\busage\."
    ),
    # The cards are keyed by the server's own item types, and a call is drawn as it comes.
    "renames the server's item types": re.compile(
        r"\bCARD_TYPES\b|\b(?:system_prompt|result|state_change|foreign)\s*:\s*[\"'](?:system|orphan|other)[\"']"
    ),
    "adds an empty extra to calls": re.compile(r"\bextra\s*:\s*\[\s*\]|\bcall\.extra\b"),
    # What a condensation folds is each item's ``folded_by`` (the server's).
    "collapses what a condensation forgot": re.compile(
        r"forgotten_event_ids[^;\n]*(?:\.add\(|new Set|\.has\()|\bforgotten\.has\(|\bisForgotten\b"
    ),
    # A call's waiting or running is its ``state`` (the server decides it from the status).
    "tells waiting or running from the status": re.compile(
        r"status\s*[!=]==\s*[\"'](?:waiting_for_confirmation|running)[\"']\s*(?:\)\s*return\b|\?)"
    ),
    # The runs without a sandbox are counted by the server (the view, an isolation frame).
    "counts runs without a sandbox": re.compile(
        r"unsandboxed_runs\s*\?\?\s*0|sandbox\s*===\s*[\"']none[\"']\s*\?[^;\n]*\+\s*1"
    ),
    # Each event frame carries its transcript updates: nothing is fetched again for one.
    "refetches the transcript for a live frame": re.compile(r"\brefreshTail\b|\bTAIL_AGAIN\b"),
}


def loaded_modules() -> set[str]:
    """The JS modules the Canvas loads: app.js and what it imports, transitively."""
    seen: set[str] = set()
    waiting = ["app.js"]
    while waiting:
        name = waiting.pop()
        if name in seen:
            continue
        seen.add(name)
        waiting.extend(IMPORT.findall((WEB / name).read_text()))
    return seen


def test_the_canvas_loads_its_modules_from_app_js():
    modules = loaded_modules()
    assert {"app.js", "conversation.js", "timeline.js", "stream.js", "cards.js"} <= modules


def test_no_loaded_module_re_derives_the_cores_rules():
    found = [
        f"{name}:{number}: {rule}: {line.strip()}"
        for name in sorted(loaded_modules())
        for number, line in enumerate((WEB / name).read_text().splitlines(), 1)
        for rule, pattern in RULES.items()
        if pattern.search(line)
    ]
    assert found == []


def test_the_rules_would_be_found(tmp_path):
    # The patterns catch the code this Canvas had before it mirrored the server.
    old = [
        "this.calls.set(event.tool_call_id, call);",
        "if (!item || item.responseId !== event.llm_response_id) {",
        "(parent === undefined && this.timeline.tail?.id === this.headId)",
        "if (RESULT_KINDS.has(event.kind)) return this.addResult(entry);",
        "this.connect(Math.max(-1, this.lastSeq - 1));",
        'const USAGE_KINDS = new Set(["action", "message", "condensation"]);',
        "this.view.cost_usd = (this.view.cost_usd ?? 0) + (event.usage.cost_usd ?? 0);",
        'const CARD_TYPES = { system_prompt: "system", result: "orphan", state_change: "other" };',
        "item.calls = raw.calls.map((call) => ({ ...call, extra: [] }));",
        "for (const extra of call.extra) box.append(renderResult(extra, ctx));",
        'if (event.kind === "condensation") for (const id of event.forgotten_event_ids ?? []) ids.add(id);',
        "return forgotten.has(item.entry.event.id);",
        'if (ctx.status === "waiting_for_confirmation") return "waiting";',
        'return ctx.status === "running" ? "running" : "pending";',
        'if (this.screen.status !== "waiting_for_confirmation") return [];',
        "const earlier = this.view?.isolation?.unsandboxed_runs ?? 0;",
        'this.showIsolation(event.value, event.value.sandbox === "none" ? earlier + 1 : earlier);',
        "await timeline.refreshTail(wanted);",
    ]
    for line in old:
        assert any(pattern.search(line) for pattern in RULES.values()), line
