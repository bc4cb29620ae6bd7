"""Default bounds of one server process (the ``treadle serve`` flags that change them): a module
without imports, so the CLI can show them without loading the server."""

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body, counted as it arrives (chunked bodies too): ``--max-body-bytes``."""
MAX_RUNNING = 64
"""Conversations one server process runs at once (a thread and a shell each): room for the
50-at-once benchmark, well below what exhausts threads or fds. ``--max-running``."""
