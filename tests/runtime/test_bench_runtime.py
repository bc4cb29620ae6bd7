"""``treadle bench runtime``'s step figure measures real steps: its realistic history used to end
in a batch whose calls waited for answers, so every measured run stopped at once and the bench
reported 2 µs per step (the check below raises when a measured run stops early)."""

from __future__ import annotations

from pathlib import Path

from treadle.bench.runtime import _step_seconds


def test_the_step_figure_comes_from_runs_that_made_their_steps(tmp_path: Path):
    (tmp_path / "workspace").mkdir()
    for history in (100, 1_000):
        seconds, condensations = _step_seconds(history, 5, tmp_path, "fast")
        # A step appends a call and its result: tens of microseconds at the very least.
        assert seconds > 1e-4
        assert condensations == 0
