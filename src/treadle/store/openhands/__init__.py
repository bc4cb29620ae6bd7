"""OpenHands SDK conversation folders (openhands-sdk 1.58.2): read them as Treadle events with
the SDK's head, import them into a store, and write stored conversations back, losslessly.
"""

from treadle.store.openhands.codec import Decoded, event_from_sdk, event_to_sdk
from treadle.store.openhands.layout import (
    MAX_EVENTS,
    find_conversation_folders,
    is_conversation_folder,
)
from treadle.store.openhands.problems import FolderProblem
from treadle.store.openhands.reader import (
    OpenHandsConversation,
    read_conversation_folder,
    sdk_head,
)
from treadle.store.openhands.transfer import (
    ImportResult,
    export_conversation,
    import_conversation,
)
from treadle.store.openhands.writer import (
    ExportError,
    WrittenFolder,
    write_conversation_folder,
)

__all__ = [
    "MAX_EVENTS",
    "Decoded",
    "ExportError",
    "FolderProblem",
    "ImportResult",
    "OpenHandsConversation",
    "WrittenFolder",
    "event_from_sdk",
    "event_to_sdk",
    "export_conversation",
    "find_conversation_folders",
    "import_conversation",
    "is_conversation_folder",
    "read_conversation_folder",
    "sdk_head",
    "write_conversation_folder",
]
