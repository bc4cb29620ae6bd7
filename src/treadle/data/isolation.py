"""What a conversation's tools ran under (ISOLATION), as the log records it at the start of each
run (a ``state_change`` with key ``isolation``), and how to say it in one line. Shared by the
CLI, the server and the client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from treadle.events.fact_keys import ISOLATION_KEY as ISOLATION_KEY

_LIMIT_WORDS = (
    ("memory_mib", "memory {} MiB"),
    ("processes", "{} processes"),
    ("file_size_mib", "files {} MiB"),
    ("cpu_seconds", "CPU {} s"),
)

_SCOPE_WORDS = {"sandbox": "in all", "process": "per process"}


class IsolationView(BaseModel):
    """The last run's isolation, and how many runs of the conversation ran without a sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sandbox: str
    network: str
    mounts_ro: tuple[str, ...] = ()
    limits: dict[str, int | None] = Field(default_factory=dict)
    override: str | None = None
    memory_scope: str | None = Field(
        default=None,
        description="sandbox: the memory limit is one total for all the sandbox's processes "
        "(a memory cgroup), tmpfs included; process: each process's address space only",
    )
    layers: tuple[str, ...] = Field(
        default=(), description="The kernel-side defences the sandbox had (docs/sandbox.md)"
    )
    user: dict[str, Any] | None = Field(
        default=None, description="The host user the sandbox ran as: {uid, gid, capabilities}"
    )
    unsandboxed_runs: int = Field(
        default=0, description="Runs of this conversation recorded with sandbox none"
    )
    text: str = Field(description="The same in one line, as `treadle log` shows it")


def isolation_text(value: Mapping[str, Any]) -> str:
    """One line: e.g. ``bubblewrap, network off; limits: memory 4096 MiB, 256 processes, ...``."""
    if value.get("sandbox") == "none":
        text = "no sandbox: the tools ran as the user, on the whole machine, with its network"
    else:
        text = f"{value.get('sandbox')}, network {value.get('network')}"
        mounts = value.get("mounts_ro") or []
        if mounts:
            text += f", read-only {', '.join(map(str, mounts))}"
        limits = value.get("limits") or {}
        words = [
            word.format(limits[name]) if limits.get(name) is not None else f"{name} unlimited"
            for name, word in _LIMIT_WORDS
        ]
        scope = _SCOPE_WORDS.get(str(value.get("memory_scope")))
        if scope and limits.get("memory_mib") is not None:
            words[0] += f" {scope}"
        text += f"; limits: {', '.join(words)}"
        user = value.get("user")
        if isinstance(user, dict) and user.get("uid") is not None:
            text += f"; as uid {user['uid']}, no capabilities"
    if value.get("override"):
        text += f" ({value['override']})"
    return text


def isolation_view(value: Mapping[str, Any], unsandboxed_runs: int = 0) -> IsolationView:
    return IsolationView(
        sandbox=str(value.get("sandbox")),
        network=str(value.get("network")),
        mounts_ro=tuple(value.get("mounts_ro") or ()),
        limits=dict(value.get("limits") or {}),
        override=value.get("override"),
        memory_scope=value["memory_scope"] if isinstance(value.get("memory_scope"), str) else None,
        layers=tuple(str(layer) for layer in value.get("layers") or () if isinstance(layer, str)),
        user=value.get("user") if isinstance(value.get("user"), dict) else None,
        unsandboxed_runs=unsandboxed_runs,
        text=isolation_text(value),
    )
