"""An eval's results as the eval sees them: its record (task file, inputs, settings, engine of
its last run), one record per task and epoch, their states, and when an eval id given again
may resume the stored eval.

A task's ``state`` is ``running`` (an attempt was handed to a worker), ``done`` (a result is
stored) or ``not_run`` (no result after its retries), with its number of attempts, the
conversation of the last one and the result as the report shows it. The rows are kept in the
store beside the conversations, by its own schema and API (``treadle.store.eval_results``,
which defines the records, since the store imports nothing above ``events``).
"""

from __future__ import annotations

import json

from treadle.errors import TreadleError
from treadle.store.eval_results import (
    EvalNotFound,
    EvalRecord,
    EvalResults,
    TaskRecord,
    TaskState,
    now_text,
)


class EvalMismatch(TreadleError, ValueError):
    """An eval id given again with another task file or other settings."""


def check_resumable(stored: EvalRecord, asked: EvalRecord) -> None:
    """EvalMismatch unless ``asked`` may resume the stored eval of its id: the same task file,
    the same files it names (when the stored eval kept their digest) and the same settings."""
    if stored.tasks_sha256 != asked.tasks_sha256:
        raise EvalMismatch(
            f"eval {asked.id} was made from another task file ({stored.tasks_file}, "
            f"sha256 {stored.tasks_sha256[:12]}…): give another --eval-id, or leave it out "
            "(the default id follows the task file and the model settings)"
        )
    if stored.inputs_sha256 and stored.inputs_sha256 != asked.inputs_sha256:
        raise EvalMismatch(
            f"eval {asked.id} was made from other starting or hidden files (the task file "
            "is the same, the files it names changed): its results are not of these files; "
            "give another --eval-id, or leave it out (the default id follows the files)"
        )
    if stored.settings != asked.settings:
        raise EvalMismatch(
            f"eval {asked.id} was made with other model settings "
            f"({json.dumps(stored.settings, sort_keys=True)}): give another --eval-id"
        )


def begin_eval(results: EvalResults, record: EvalRecord) -> EvalRecord:
    """Store a new eval, or check that ``record`` may resume the stored one
    (``check_resumable``), and record the engine of this run; the eval as stored."""
    stored = results.add_eval(record)
    check_resumable(stored, record)
    return results.set_engine(record.id, record.engine)


__all__ = [
    "EvalMismatch",
    "EvalNotFound",
    "EvalRecord",
    "EvalResults",
    "TaskRecord",
    "TaskState",
    "begin_eval",
    "check_resumable",
    "now_text",
]
