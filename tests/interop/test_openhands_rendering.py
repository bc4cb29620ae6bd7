"""Tool results are rendered as the SDK's observation classes render them (``to_llm_content``),
checked against what SDK 1.58.2 itself produced (tests/fixtures/openhands/rendering_cases.json):
the terminal's framing, its 30,000-character truncation naming the saved file, the error
header, the base rule."""

from __future__ import annotations

import pytest

from support.openhands_folders import FIXTURES, read_json
from treadle.store.openhands.kinds import ReadFrom
from treadle.store.openhands.rendering import joined_text, observation_parts

CASES = read_json(FIXTURES / "rendering_cases.json")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["observation"]["kind"])
def test_observation_parts_are_the_sdks(case):
    observation = case["observation"]
    content = ReadFrom(observation).parts("content")
    parts, exact = observation_parts(observation, content)
    assert exact
    strip = [{k: v for k, v in part.items() if k != "cache_prompt"} for part in parts]
    expected = [
        {k: v for k, v in part.items() if k != "cache_prompt"} for part in case["llm_content"]
    ]
    assert strip == expected
    assert joined_text(parts) == joined_text(case["llm_content"])


def test_a_class_rendered_by_tool_code_not_mirrored_is_flagged():
    parts, exact = observation_parts({"kind": "BrowserObservation", "content": []}, [])
    assert parts == []
    assert not exact
