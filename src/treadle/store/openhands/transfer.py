"""Imports OpenHands SDK conversation folders into an ``EventStore`` and exports stored
conversations back to folders. A folder the store cannot hold is not imported at all.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from treadle.errors import TreadleError
from treadle.events.audit import AuditReport, Violation, audit_events
from treadle.events.model import event_to_json
from treadle.store.audit_summary import keep_imported
from treadle.store.base import ConversationExists, ConversationNotFound, EventStore
from treadle.store.checks import check_conversation_id
from treadle.store.conversation_rows import metadata_json
from treadle.store.openhands.layout import BASE_STATE as BASE_STATE_FILE
from treadle.store.openhands.layout import MAX_EVENTS
from treadle.store.openhands.problems import BASE_STATE, FolderProblem
from treadle.store.openhands.reader import OpenHandsConversation, read_conversation_folder
from treadle.store.openhands.writer import WrittenFolder, write_conversation_folder

LAYOUT_VERSION = "1.58.2"
"""The openhands-sdk version whose folder layout and event kinds this package reads."""
ORIGIN_KEY = "origin"
OPENHANDS_KEY = "openhands"
"""Metadata key of what an export needs back: ``{"base_state": ...}``."""
CONVERSATION_EXISTS = "CONVERSATION-EXISTS"
STORE_ERROR = "STORE-REFUSED"
STORE_REFUSES = frozenset({"APPEND-DUP-ID", "TREE-MISSING", "TREE-CYCLE", "TREE-PARENT"})
"""Audit findings that an append would refuse (APPEND): such a log cannot be stored as is."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What unpacking one archive may write: a small .tar.gz can expand a thousandfold."""

    max_bytes: int = 256 * 1024 * 1024
    """Bytes of all extracted files together (as their tar headers declare them)."""
    max_members: int = MAX_EVENTS + 10_000
    """Files, folders and links: one full conversation (an event a file) and room to spare."""


class ArchiveError(TreadleError):
    """The archive cannot be read as a tar(.gz) of conversation folders (bad input)."""


class ArchiveTooLarge(ArchiveError):
    """Unpacking the archive would go past ``ArchiveLimits`` (HTTP 413)."""


def unpack_archive(archive: IO[bytes], into: Path, limits: ArchiveLimits) -> None:
    """Extract the tar(.gz) ``archive`` into the folder ``into``, member by member, stopping
    (ArchiveTooLarge) before a member that would go past ``limits``. The caller owns ``into``
    and removes it (what was extracted before the stop is in it)."""
    total = 0
    try:
        with tarfile.open(fileobj=archive, mode="r:*") as tar:
            for count, member in enumerate(tar, start=1):
                total += max(member.size, 0)
                if count > limits.max_members or total > limits.max_bytes:
                    what = (
                        f"more than {limits.max_members} members"
                        if count > limits.max_members
                        else f"more than {limits.max_bytes} bytes unpacked"
                    )
                    raise ArchiveTooLarge(
                        f"the archive holds {what} (the server's --max-archive-members / "
                        "--max-archive-bytes); nothing was imported"
                    )
                # The "data" filter refuses absolute paths, .. and links leading out of ``into``.
                tar.extract(member, into, filter="data")
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ArchiveError(f"not a readable tar(.gz) archive: {error}") from None


@dataclass
class ImportResult:
    """What importing one folder did: ``imported`` or not, and why, naming files."""

    folder: Path
    conversation_id: str | None
    imported: bool = False
    replaced: bool = False
    event_count: int = 0
    head: str | None = None
    problems: list[FolderProblem] = field(default_factory=list)
    notices: list[FolderProblem] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    """Contract violations the store can hold (reported, imported anyway)."""


def import_conversation(
    store: EventStore, folder: Path, *, replace: bool = False, max_events: int = MAX_EVENTS
) -> ImportResult:
    """Import the conversation folder ``folder`` under its SDK conversation id.

    Nothing is written when the folder has a problem, when the store could not hold its log
    (duplicate ids, missing parents, cycles, parents after children), or when the conversation
    exists and ``replace`` is false. Never raises for bad content: see ``problems``. An
    imported log keeps its audit checkpoint (``audit_summary.keep_imported``).
    """
    conversation = read_conversation_folder(folder, max_events=max_events)
    result = ImportResult(
        folder=folder,
        conversation_id=conversation.conversation_id,
        event_count=len(conversation.events),
        head=conversation.head,
        problems=list(conversation.problems),
        notices=list(conversation.notices),
    )
    report = audit_events(conversation.events, head=conversation.head)
    result.problems.extend(unstorable(conversation, report))
    result.notices.extend(  # a lagging saved head (TREE-HEAD): imported as the SDK takes it
        FolderProblem(
            notice.contract,
            notice.message,
            conversation.files_of(notice.event_ids),
            notice.event_ids,
        )
        for notice in report.notices
    )
    result.violations = [v for v in report.violations if v.contract not in STORE_REFUSES]
    conversation_id = conversation.conversation_id
    if result.problems or conversation_id is None:
        return result
    # What the store would refuse is found before anything is written (or, with ``replace``,
    # deleted): a bad id, metadata that is not JSON (NaN, a lone surrogate), unstorable events.
    try:
        check_conversation_id(conversation_id)
        metadata = import_metadata(conversation)
        metadata_json(metadata)
    except ValueError as error:
        result.problems.append(FolderProblem(BASE_STATE, str(error), (BASE_STATE_FILE,)))
        return result
    if _exists(store, conversation_id):
        if not replace:
            result.problems.append(
                FolderProblem(
                    CONVERSATION_EXISTS,
                    f"conversation {conversation_id!r} is already in the store; pass --replace "
                    "to overwrite it with this folder",
                )
            )
            return result
        unwritable = _unwritable(conversation)
        if unwritable is not None:  # checked before the delete: a refused replace keeps the old
            result.problems.append(unwritable)
            return result
        store.delete_conversation(conversation_id)
        result.replaced = True
    try:
        store.create_conversation(conversation_id, metadata=metadata)
    except ConversationExists:  # made by another writer since the look above
        result.problems.append(
            FolderProblem(
                CONVERSATION_EXISTS, f"conversation {conversation_id!r} appeared meanwhile"
            )
        )
        return result
    try:
        if conversation.events:
            store.append_batch(conversation_id, conversation.events)
        store.set_head(conversation_id, conversation.head)
    except (TreadleError, ValueError, RecursionError) as error:
        # ValueError: an event the JSON encoder refuses (too deep, not JSON); all or nothing.
        store.delete_conversation(conversation_id)
        result.problems.append(FolderProblem(STORE_ERROR, f"the store refused the log: {error}"))
        return result
    # while the log is in memory: the first audit of the conversation starts from it
    keep_imported(store, conversation_id, conversation.events)
    result.imported = True
    return result


def unstorable(conversation: OpenHandsConversation, report: AuditReport) -> list[FolderProblem]:
    """The findings of ``report`` that a store would refuse, naming the files at fault."""
    return [
        FolderProblem(
            violation.contract,
            f"{violation.message}; a store cannot hold this log: fix the named file(s)",
            conversation.files_of(violation.event_ids),
            violation.event_ids,
        )
        for violation in report.violations
        if violation.contract in STORE_REFUSES
    ]


def import_metadata(conversation: OpenHandsConversation) -> dict[str, Any]:
    """The conversation metadata of an import: where it came from, and the SDK state an export
    writes back (everything but the events, which are in the log)."""
    metadata: dict[str, Any] = {
        ORIGIN_KEY: {
            "format": "openhands",
            # The folder does not record the SDK version that wrote it.
            "sdk_version": None,
            "layout_version": LAYOUT_VERSION,
            "schema": conversation.schema,
            "path": str(conversation.folder.resolve()),
        }
    }
    if conversation.base_state is not None:
        metadata[OPENHANDS_KEY] = {"base_state": conversation.base_state}
    return metadata


def export_conversation(store: EventStore, conversation_id: str, folder: Path) -> WrittenFolder:
    """Write stored conversation ``conversation_id`` to ``folder`` in the SDK layout.

    Raises ConversationNotFound, or ExportError naming what the SDK format cannot take.
    """
    info = store.get_conversation(conversation_id)
    events = [stored.event for stored in store.get_range(conversation_id, 0, info.event_count)]
    metadata = info.metadata or {}
    kept = (metadata.get(OPENHANDS_KEY) or {}).get("base_state")
    # A conversation ``treadle run`` made names its model and workspace in its settings.
    settings = metadata.get("settings") or {}
    return write_conversation_folder(
        folder,
        events,
        head=store.head(conversation_id),
        conversation_id=conversation_id,
        base_state=kept,
        model=(settings.get("model") or {}).get("model"),
        working_dir=settings.get("workspace"),
    )


def _unwritable(conversation: OpenHandsConversation) -> FolderProblem | None:
    """The first event that cannot be written as JSON, as a problem naming its file."""
    for event in conversation.events:
        try:
            event_to_json(event)
        except (ValueError, RecursionError) as error:
            return FolderProblem(
                STORE_ERROR,
                f"event {event.id!r} cannot be stored: {error}",
                conversation.files_of([event.id]),
                (event.id,),
            )
    return None


def _exists(store: EventStore, conversation_id: str) -> bool:
    try:
        store.get_conversation(conversation_id)
    except ConversationNotFound:
        return False
    return True
