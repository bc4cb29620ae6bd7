"""One worker process of ``treadle serve --workers N``: a whole agent server (``create_app``)
on the unix socket its front gave it, its settings read from stdin (a pickle from the front,
its parent). It stops on SIGTERM (from the front; Ctrl-C reaches the front, which stops it),
and dies with the front (``PR_SET_PDEATHSIG``: a killed front leaves no worker behind)."""

from __future__ import annotations

import copy
import ctypes
import faulthandler
import os
import pickle
import signal
import sys
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from treadle.data.ids import set_born_in
from treadle.server.workers.routing import WorkerPlace

PR_SET_PDEATHSIG = 1
KEEP_ALIVE_S = 60
"""Idle connections from the front stay open this long (the front reuses them for 20 s)."""


class _WorkerServer(uvicorn.Server):
    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT:
            return  # the terminal's Ctrl-C reached the whole group: the front decides
        super().handle_exit(sig, frame)


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the front died before the line above
        os._exit(1)


def _log_config(slot: int) -> dict[str, Any]:
    config = copy.deepcopy(LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = f"[worker {slot}] " + formatter["fmt"]
    # Treadle's own warnings (and what its runs log, e.g. a take-over) with the same prefix.
    config["loggers"]["treadle"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def main() -> None:
    settings: dict[str, Any] = pickle.loads(sys.stdin.buffer.read())
    _die_with_parent(settings["parent"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    slot, count = settings["slot"], settings["count"]
    set_born_in(slot, count)  # the ids this worker makes are routed back to it
    from treadle.server.app import create_app

    application = create_app(
        **settings["app"], worker=WorkerPlace(slot, count, settings["group"], settings["folder"])
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = uvicorn.Config(
        application,
        uds=settings["socket"],
        log_level="info",
        log_config=_log_config(slot),
        access_log=False,  # the front logs every request
        ws="websockets-sansio",
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=10,
    )
    _WorkerServer(config).run()


if __name__ == "__main__":
    main()
