"""Replays of a recorded conversation (docs/replay.md): ``recorded`` feeds the runtime the
recorded responses and results and checks it makes the same events (REPLAY-RECORDED);
``rerun`` runs the tools again from the starting files and reports each result that differs
(REPLAY-RERUN), into a new conversation linked to the original.

``recording``: what a replay is fed; ``recorded_model`` and ``recorded_tools``: the model and
the tools that answer from it; ``driver``: the recorded inputs fed to the run loop;
``compare``: the divergences; ``report``: their shape; ``recorded_mode`` and ``rerun_mode``:
the two modes.
"""

from treadle.runtime.replay.recorded_mode import replay_recorded
from treadle.runtime.replay.recording import ReplayInputError, read_recording
from treadle.runtime.replay.report import ActionCheck, Divergence, ReplayReport

__all__ = [
    "ActionCheck",
    "Divergence",
    "ReplayInputError",
    "ReplayReport",
    "read_recording",
    "replay_recorded",
]
