"""A conversation's settings as data (model choice, tools, confirmation, workspace, sandbox,
system prompt, condensation, budgets): what a client sends and a store keeps. Validated here without the runtime;
``treadle.runtime.settings`` builds the agent from them. Never holds an API key."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from treadle.data.choices import CondenseMode as CondenseMode
from treadle.data.choices import ConfirmationPolicy as ConfirmationPolicy
from treadle.data.hooks import HookSettings
from treadle.data.mcp import MCP_TOOL_NAMING, MCPServerConfig, MCPToolNaming, check_server_names
from treadle.data.network import network_looser, normalize_network

SETTINGS_KEY = "settings"
"""Where the settings live in a conversation's metadata."""

BUILTIN_TOOL_NAMES: tuple[str, ...] = ("terminal", "file_editor", "task_tracker", "think", "finish")
"""The built-in tools a conversation may name, in their default order (the runtime's
``BUILTIN_TOOLS`` has a factory for each: a test keeps the two the same)."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful software agent working in a workspace folder. Use the tools to inspect "
    "and change files and to run commands; check your work before you finish. When the task is "
    "done, call `finish` with a short summary. Ask the user when you need a decision."
)


class ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | str = Field(
        default_factory=dict,
        description="An object, or a raw string sent as is (may be invalid JSON)",
    )
    id: str | None = None


class ScriptedResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    id: str | None = None


class ModelChoice(BaseModel):
    """Which model answers: a LiteLLM model (its key comes from the environment of the process
    that runs the conversation) or a scripted one (a script file, or its responses inline)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["litellm", "scripted"]
    model: str | None = None
    base_url: str | None = None
    script: str | None = Field(
        default=None, description="Path of the scripted model's JSON file (the CLI's way)"
    )
    responses: tuple[ScriptedResponse, ...] | None = Field(
        default=None,
        description="The scripted model's responses inline (a script file's `responses`); "
        "a server takes scripted models this way",
    )
    summaries: tuple[str, ...] | None = Field(
        default=None,
        description="The scripted model's answers to summary requests, inline (a script "
        "file's `summaries`); with `responses` only",
    )

    @model_validator(mode="after")
    def _fields_of_the_kind(self) -> ModelChoice:
        if self.kind == "scripted":
            if (self.script is None) == (self.responses is None):
                raise ValueError("a scripted model needs exactly one of responses or script")
            if self.summaries is not None and self.responses is None:
                raise ValueError("summaries go inline with responses (a script file has its own)")
        elif self.script is not None or self.responses is not None or self.summaries is not None:
            raise ValueError("script, responses and summaries apply to a scripted model only")
        return self


DEFAULT_SNAPSHOT_EXCLUDES: tuple[str, ...] = (
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
)
"""Caches a workspace rebuilds by itself: snapshots and per-call diffs leave them out even in a
workspace without a ``.gitignore`` (every ``.pyc`` of a test run showed as a change)."""
MAX_SNAPSHOT_EXCLUDES = 100


class SnapshotSettings(BaseModel):
    """Workspace snapshots (docs/snapshots.md): the files after each batch of calls, so that a
    branch switch or a fork can put them back. ``true``/``false`` stand for on/off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    include_git: bool = Field(
        default=False, description="Also snapshot the workspace's own .git folder"
    )
    max_file_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=0,
        description="Files larger than this are skipped (the snapshot lists them)",
    )
    exclude: tuple[str, ...] = Field(
        default=DEFAULT_SNAPSHOT_EXCLUDES,
        max_length=MAX_SNAPSHOT_EXCLUDES,
        description="Patterns (.gitignore syntax) never snapshotted, besides the workspace's "
        "own ignore files: by default caches that are rebuilt anyway; [] snapshots them too",
    )
    workspace_ignore_files: bool = Field(
        default=True,
        description="Honour the workspace's own .gitignore files; false: only `exclude` decides "
        "(an eval's snapshots: an ignore file the agent wrote must hide nothing)",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_bool(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value

    @field_validator("exclude")
    @classmethod
    def _one_line_patterns(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            if not pattern.strip() or len(pattern) > 200:
                raise ValueError(
                    f"snapshot exclude pattern {pattern[:40]!r}: give 1-200 characters"
                )
            if any(char in pattern for char in "\n\r\0"):
                raise ValueError(
                    f"snapshot exclude pattern {pattern[:40]!r}: one line, no line break or NUL"
                )
        return patterns


SandboxKind = Literal["bubblewrap", "none"]
NetworkChoice = str
"""``off``, ``on`` or ``allow=HOST[:PORT],…`` (``treadle.data.network``), kept normalized."""


class SandboxLimits(BaseModel):
    """Limits on what the sandboxed commands use; None is unlimited. Memory (address space),
    file size and CPU time apply to each process; ``processes`` to the whole sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mib: int | None = Field(default=4096, ge=16)
    processes: int | None = Field(default=256, ge=8)
    file_size_mib: int | None = Field(default=4096, ge=1)
    cpu_seconds: int | None = Field(default=3600, ge=1)

    def within(self, limit: SandboxLimits) -> list[str]:
        """The names of the limits that are looser than ``limit``'s (None is the loosest)."""
        looser = []
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(limit, name)
            if theirs is not None and (mine is None or mine > theirs):
                looser.append(name)
        return looser


class SandboxSettings(BaseModel):
    """Where the tools' processes run: ``bubblewrap`` (a sandbox: read-only system, the
    workspace writable, private HOME and /tmp, own process namespace, no network unless
    ``network`` is on or an allow list) or ``none`` (as this process's user, on the whole
    machine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SandboxKind = "bubblewrap"
    network: NetworkChoice = Field(
        default="off",
        description="off: none; on: the host's network, host services on 127.0.0.1 included; "
        "allow=HOST[:PORT],...: only those hosts, through a proxy (a name, *.name or an IP; "
        "the port defaults to 443 and 80; loopback only when named with a port)",
        examples=["off", "on", "allow=pypi.org,*.pythonhosted.org,127.0.0.1:8080"],
    )
    mounts_ro: tuple[str, ...] = Field(
        default=(), description="Absolute host paths shown read-only inside the sandbox"
    )
    limits: SandboxLimits = SandboxLimits()

    @field_validator("network")
    @classmethod
    def _network_choice(cls, network: str) -> str:
        return normalize_network(network)

    @field_validator("mounts_ro")
    @classmethod
    def _absolute_paths(cls, mounts: tuple[str, ...]) -> tuple[str, ...]:
        for mount in mounts:
            if not mount.startswith("/") or "\0" in mount:
                raise ValueError(f"mount {mount!r} is not an absolute path: give one like /opt/x")
        return mounts

    @model_validator(mode="after")
    def _none_has_no_sandbox_options(self) -> SandboxSettings:
        if self.kind == "none" and self.mounts_ro:
            raise ValueError("mounts_ro applies to a sandbox only (kind none sees every path)")
        if self.kind == "none" and self.network not in ("off", "on"):
            raise ValueError(
                "network allow=... applies to a sandbox only (kind none reaches every host)"
            )
        return self

    def looser_than(self, limit: SandboxSettings) -> list[str]:
        """How these settings ask for less isolation than ``limit`` allows (empty: none)."""
        problems: list[str] = []
        if limit.kind == "none":
            return problems  # a limit of no sandbox allows anything
        if self.kind == "none":
            return ["sandbox none (the limit is bubblewrap)"]
        network = network_looser(self.network, limit.network)
        if network is not None:
            problems.append(network)
        extra = [mount for mount in self.mounts_ro if mount not in limit.mounts_ro]
        if extra:
            allowed = ", ".join(limit.mounts_ro) or "none"
            problems.append(f"mounts {', '.join(extra)} (allowed: {allowed})")
        for name in self.limits.within(limit.limits):
            problems.append(
                f"limits.{name} {getattr(self.limits, name)} "
                f"(the limit is {getattr(limit.limits, name)})"
            )
        return problems


class ConversationSettings(BaseModel):
    """Everything needed to run a conversation again in any process, stored with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelChoice
    tools: tuple[str, ...] = BUILTIN_TOOL_NAMES
    confirmation: ConfirmationPolicy = ConfirmationPolicy.NEVER
    workspace: str
    sandbox: SandboxSettings = SandboxSettings()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    condense: CondenseMode = Field(
        default=CondenseMode.AUTO,
        description="`auto`: condense when the next request would pass the token budget, or "
        "when the provider refuses a request as too long; `off`: send the whole active path",
    )
    context_tokens: int | None = Field(
        default=None,
        ge=256,
        le=100_000_000,
        description="The token budget of a request (default: 0.8 of the model's input window "
        "when LiteLLM knows the model; unknown models without it condense only when the "
        "provider refuses)",
    )
    snapshots: SnapshotSettings = SnapshotSettings()
    """On by default: a local workspace is snapshotted after each batch of calls."""
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="Budget: the conversation's model calls may cost this much in USD in all "
        "(summary calls included); reaching it pauses the run before the next model call. "
        "Raising it lets the run go on",
    )
    max_total_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="Budget: the tokens in and out of the conversation's model calls in all "
        "(summary calls included; not a response's `max_tokens`); reaching it pauses the run "
        "before the next model call. Raising it lets the run go on",
    )
    mcp_servers: dict[str, MCPServerConfig] = Field(
        default_factory=dict,
        description="MCP servers whose tools the agent gets, in the `mcpServers` shape "
        "(docs/mcp.md); secrets as `${VAR}` references, resolved where the conversation runs",
    )
    mcp_tool_naming: MCPToolNaming = Field(
        default=MCP_TOOL_NAMING,
        description="The rule naming MCP tools (`mcp__<server>__<tool>`, fitted to 64 "
        "characters), fixed when the conversation is created",
    )

    _mcp_server_names = field_validator("mcp_servers")(check_server_names)

    hooks: HookSettings | None = Field(
        default=None,
        description="Hooks in Claude Code's `hooks` shape (docs/hooks.md), run by whichever "
        "process runs the conversation; on a server, only in a sandbox",
    )
    trust_workspace_hooks: bool = Field(
        default=False,
        description="Also run the hooks of the workspace's .treadle/settings.json (which the "
        "agent itself can write); on a server, only in a sandbox",
    )

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: tuple[str, ...]) -> tuple[str, ...]:
        # Refused with the settings (a 422 from the API), not later when the agent is built.
        unknown = [name for name in tools if name not in BUILTIN_TOOL_NAMES]
        if unknown:
            raise ValueError(
                f"unknown tool(s) {', '.join(map(repr, unknown))}; the built-in tools are "
                f"{', '.join(BUILTIN_TOOL_NAMES)}"
            )
        twice = sorted({name for name in tools if tools.count(name) > 1})
        if twice:
            raise ValueError(f"tool(s) {', '.join(twice)} named more than once: name each once")
        return tools

    @classmethod
    def scripted(
        cls, script: str | Path, workspace: str | Path, **fields: Any
    ) -> ConversationSettings:
        return cls(
            model=ModelChoice(kind="scripted", script=str(Path(script).resolve())),
            workspace=str(Path(workspace).resolve()),
            **fields,
        )

    @classmethod
    def scripted_inline(
        cls,
        responses: Sequence[dict[str, Any] | ScriptedResponse],
        workspace: str | Path,
        **fields: Any,
    ) -> ConversationSettings:
        """A scripted model whose responses travel with the settings (how a server takes one)."""
        scripted = tuple(ScriptedResponse.model_validate(response) for response in responses)
        return cls(
            model=ModelChoice(kind="scripted", responses=scripted),
            workspace=str(Path(workspace).resolve()),
            **fields,
        )

    @classmethod
    def litellm(
        cls, model: str, workspace: str | Path, base_url: str | None = None, **fields: Any
    ) -> ConversationSettings:
        return cls(
            model=ModelChoice(kind="litellm", model=model, base_url=base_url),
            workspace=str(Path(workspace).resolve()),
            **fields,
        )

    def to_metadata(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> ConversationSettings | None:
        data = metadata.get(SETTINGS_KEY)
        return None if data is None else cls.model_validate(data)
