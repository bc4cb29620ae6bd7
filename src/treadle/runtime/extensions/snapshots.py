"""Workspace snapshots as a run extension: the files a conversation starts from, and after
each batch of calls the files they left (read again only when a call could change them);
a run forgets the last snapshot, since files may have changed by hand between runs
(docs/snapshots.md)."""

from __future__ import annotations

from collections.abc import Sequence

from treadle.events.model import ActionEvent
from treadle.runtime.extensions.base import RunExtension, RunScope
from treadle.runtime.snapshots import WorkspaceSnapshots, try_record
from treadle.runtime.tools import ToolSet


class SnapshotsExtension(RunExtension):
    def __init__(self, snapshots: WorkspaceSnapshots, tools: ToolSet) -> None:
        self.snapshots = snapshots
        self.tools = tools

    def conversation_started(self, scope: RunScope) -> None:
        try_record(self.snapshots, scope.log)

    def run_started(self, scope: RunScope) -> None:
        self.snapshots.forget_last()

    def after_batch(self, scope: RunScope, actions: Sequence[ActionEvent]) -> None:
        names = [action.tool_name for action in actions]
        try_record(self.snapshots, scope.log, self.tools.may_change_files(names))
