"""From a conversation's ``mcpServers`` settings to live MCP tools: the config file read with named
errors, ``${VAR}`` references resolved and masked, stdio servers wrapped in bubblewrap.

A server that cannot start is not a failure of the conversation: it is left out, and a call to
one of its tools is answered by an agent error naming it (``ToolSet``'s ``unavailable``).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from treadle.data.mcp import (
    VARIABLE_REFERENCE,
    MCPServerConfig,
    check_server_names,
    mcp_tool_name,
)
from treadle.data.network import allow_list
from treadle.data.settings import SandboxLimits
from treadle.errors import TreadleError
from treadle.files import read_regular_file
from treadle.runtime.mcp_servers import MCPTools
from treadle.runtime.secrets import MIN_SECRET_LENGTH, Secrets
from treadle.runtime.tools.mcp import MCPServerSpec, MCPTool, connect_mcp_tools
from treadle.runtime.workspace.base import SandboxUnavailable
from treadle.runtime.workspace.network_proxy import SandboxNetwork, proxy_problem
from treadle.runtime.workspace.sandbox import (
    BWRAP,
    SANDBOX_HOME,
    SYSTEM_DIRS,
    SandboxLayout,
    bwrap_argv,
    check_bubblewrap,
    memory_limit,
    processes_limit,
    sandbox_cgroup,
    sandbox_files,
    sandbox_rlimits,
    tmpfs_bytes,
)
from treadle.runtime.workspace.sandbox_user import SandboxUser
from treadle.runtime.workspace.shell import DEFAULT_PATH, PidsCgroup, ShellCommand, launch_argv

logger = logging.getLogger(__name__)

MCP_CONFIG_MAX_BYTES = 1024 * 1024
CONFIG_KEY = "mcpServers"
DEFAULT_CALL_TIMEOUT_S = 120.0


class MCPConfigError(TreadleError, ValueError):
    """An MCP config file (or a server's entry) that cannot be used, with where and why."""


def load_mcp_config(path: str | Path) -> dict[str, MCPServerConfig]:
    """The servers of an ``mcpServers`` JSON file (Claude Desktop, Cursor, Claude Code shape:
    ``{"mcpServers": {"name": {...}}}``). ``MCPConfigError`` names the file and the problem:
    the JSON error's line and column, or the key whose value is refused."""
    try:
        raw = read_regular_file(path, MCP_CONFIG_MAX_BYTES)
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise MCPConfigError(f"cannot read MCP config {path}: {reason}") from None
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise MCPConfigError(f"MCP config {path}: not UTF-8 (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise MCPConfigError(
            f"MCP config {path}: invalid JSON at line {error.lineno} column {error.colno}: "
            f"{error.msg}"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get(CONFIG_KEY), dict):
        raise MCPConfigError(
            f'MCP config {path}: expected an object with the key "{CONFIG_KEY}" holding an '
            'object of servers, e.g. {"mcpServers": {"files": {"command": "...", "args": []}}}'
        )
    return parse_servers(document[CONFIG_KEY], where=f"MCP config {path}")


def parse_servers(entries: Mapping[str, Any], where: str) -> dict[str, MCPServerConfig]:
    """Each entry as an ``MCPServerConfig``; ``MCPConfigError`` naming the key refused."""
    servers: dict[str, MCPServerConfig] = {}
    for name, entry in entries.items():
        try:
            servers[name] = MCPServerConfig.model_validate(entry)
        except ValidationError as error:
            detail = error.errors()[0]
            key = ".".join(str(part) for part in (CONFIG_KEY, name, *detail["loc"]))
            message = detail["msg"].removeprefix("Value error, ")
            raise MCPConfigError(f"{where}: {key}: {message}") from None
    try:
        return check_server_names(servers)
    except ValueError as error:
        raise MCPConfigError(f"{where}: {CONFIG_KEY}: {error}") from None


def missing_variables(
    servers: Mapping[str, MCPServerConfig], environ: Mapping[str, str]
) -> list[str]:
    """``server: VAR`` for each reference that ``environ`` does not set."""
    return [
        f"{name}: ${{{variable}}}"
        for name, config in servers.items()
        for variable in config.references()
        if not environ.get(variable)
    ]


@dataclass(frozen=True)
class MCPLaunch:
    """One server to connect, as the process that runs the conversation decided: whose
    environment resolves its references, and whether it runs sandboxed."""

    name: str
    config: MCPServerConfig
    sandboxed: bool
    environ: Mapping[str, str] = field(repr=False)
    extra_mounts: bool = True
    """Show the command's own files (its installation prefix, file arguments) read-only;
    False for a server's client: nothing of the host beyond the system, the workspace and
    the sandbox's ``mounts_ro`` (the operator's choice), where the command must lie."""


def connect_servers(
    launches: Sequence[MCPLaunch],
    *,
    secrets: Secrets,
    workspace: Path,
    mounts_ro: Sequence[str] = (),
    limits: SandboxLimits | None = None,
    errlog: TextIO | None = None,
    user: SandboxUser | None = None,
) -> MCPTools:
    """Connect every server at once (each in its own thread: a slow one does not delay the
    others). Resolved secret values are registered with ``secrets`` (masked, not exported)
    before any server starts; a failure is kept as a masked reason, never raised.
    ``limits``: a sandboxed server's resource limits (the sandboxed terminal's; None: the
    defaults); ``user``: the host user a sandboxed server runs as (None: this process's)."""
    prepared: list[tuple[MCPLaunch, MCPServerSpec | str]] = []
    for launch in launches:
        try:
            spec = server_spec(launch, secrets, workspace, mounts_ro, limits, user)
        except MCPConfigError as error:
            prepared.append((launch, secrets.mask(str(error))))
        else:
            prepared.append((launch, spec))
    tools: list[MCPTool] = []
    unavailable: dict[str, str] = {}
    servers: list[dict[str, Any]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(prepared))) as pool:
        futures = {
            launch.name: pool.submit(_connect, launch.name, spec, errlog)
            for launch, spec in prepared
            if isinstance(spec, MCPServerSpec)
        }
        for launch, prepared_spec in prepared:
            if isinstance(prepared_spec, str):
                unavailable[launch.name] = prepared_spec
                servers.append(server_fact(launch, [], prepared_spec))
                continue
            try:
                connected = futures[launch.name].result()
            except Exception as error:
                unavailable[launch.name] = secrets.mask(str(error))
                servers.append(server_fact(launch, [], unavailable[launch.name]))
            else:
                tools.extend(connected)
                servers.append(server_fact(launch, [tool.name for tool in connected], None))
    for name, reason in unavailable.items():
        logger.warning("MCP server %r is unavailable: %s", name, reason)
    return MCPTools(tools, unavailable, servers)


def server_fact(launch: MCPLaunch, tools: list[str], error: str | None) -> dict[str, Any]:
    """One entry of the ``mcp_servers`` fact: how the server was reached and under what, and
    whether it connected (``error``: the masked reason it did not). Nothing of its command,
    arguments, environment, headers or URL, which may hold secrets."""
    http = launch.config.url is not None
    if http:
        sandbox, network = None, None
    elif launch.sandboxed:
        sandbox, network = "bubblewrap", launch.config.network_choice
    else:
        sandbox, network = "none", "on"
    return {
        "name": launch.name,
        "transport": "http" if http else "stdio",
        "sandbox": sandbox,
        "network": network,
        "status": "failed" if error is not None else "connected",
        "error": error,
        "tools": tools,
    }


def _connect(name: str, spec: MCPServerSpec, errlog: TextIO | None) -> list[MCPTool]:
    return connect_mcp_tools(spec, errlog=errlog, name_tool=lambda tool: mcp_tool_name(name, tool))


def server_spec(
    launch: MCPLaunch,
    secrets: Secrets,
    workspace: Path,
    mounts_ro: Sequence[str] = (),
    limits: SandboxLimits | None = None,
    user: SandboxUser | None = None,
) -> MCPServerSpec:
    """The connection spec of a launch: references resolved (their values registered with
    ``secrets``), a sandboxed stdio command wrapped in bubblewrap under the sandbox's
    resource limits (``limits``, default the sandbox's defaults): memory, file size and CPU
    time per process, and the number of processes in a pids cgroup of its own when this
    process may make one (as for the sandboxed terminal)."""
    config = resolve(launch.name, launch.config, launch.environ, secrets)
    timeout = config.timeout or DEFAULT_CALL_TIMEOUT_S
    if config.url is not None:
        return MCPServerSpec(
            name=launch.name, url=config.url, headers=config.headers, call_timeout=timeout
        )
    command = config.command or ""
    if not launch.sandboxed:
        return MCPServerSpec(
            name=launch.name,
            command=command,
            args=config.args,
            env=config.env,
            cwd=config.cwd or str(workspace),
            call_timeout=timeout,
        )
    check_bubblewrap(user=user)  # SandboxUnavailable: never a silent fallback to no sandbox
    executable = _executable(launch.name, command, launch.environ)
    real = Path(os.path.realpath(executable))
    hidden = [path for path in dict.fromkeys((executable, real))
              if not _visible(path, workspace, mounts_ro)]  # fmt: skip
    if not launch.extra_mounts and hidden:
        raise MCPConfigError(
            f"MCP server {launch.name!r} cannot start: its command {hidden[0]} is not inside "
            "the sandbox (the system folders, the workspace, or a mounts_ro path this server "
            "allows)"
        )
    argv = sandbox_argv(
        executable,
        config.args,
        workspace=workspace,
        cwd=config.cwd,
        network=config.network_choice,
        mounts=_mounts(executable, config, launch.extra_mounts, mounts_ro, workspace),
        tmpfs_size=tmpfs_bytes(limits or SandboxLimits()),
    )
    env = {"PATH": f"{executable.parent}:{DEFAULT_PATH}", "HOME": SANDBOX_HOME, "TERM": "dumb"}
    env["LANG"] = launch.environ.get("LANG") or "C.UTF-8"
    env.update(config.env)
    allow = allow_list(config.network_choice)
    if allow is not None and (problem := proxy_problem()):
        raise MCPConfigError(f"MCP server {launch.name!r} cannot start: {problem}")
    network = SandboxNetwork(allow) if allow is not None else None
    if network is not None:
        # Its own proxy, bound inside this server's sandbox; it ends when the sandbox does.
        argv = list(network.wrap(argv))
        env.update(network.environment)
    # Last: the cgroup is this spec's to free (its connection removes it when it closes).
    try:
        limited = _limited(launch.name, argv, limits or SandboxLimits(), user)
    except BaseException:
        if network is not None:
            network.close()
        raise
    return MCPServerSpec(
        name=launch.name,
        command=limited.argv[0],
        args=tuple(limited.argv[1:]),
        env=env,
        call_timeout=timeout,
        label=f"sandboxed: {' '.join([str(executable), *config.args])}",
        pids_cgroup=None if limited.cgroup is None else str(limited.cgroup.path),
    )


@dataclass(frozen=True)
class _Limited:
    argv: list[str]
    cgroup: PidsCgroup | None


def _limited(
    name: str, argv: Sequence[str], limits: SandboxLimits, user: SandboxUser | None
) -> _Limited:
    """``argv`` (bubblewrap's) started under ``limits``, as the sandboxed terminal's shell:
    resource limits set, the cgroups joined and the seccomp filter opened by exec, so every
    process of it inherits them."""
    try:
        files = sandbox_files()
        cgroup = sandbox_cgroup(processes_limit(limits.processes), memory_limit(limits.memory_mib))
    except SandboxUnavailable as error:
        raise MCPConfigError(f"MCP server {name!r} cannot start: {error}") from None
    command = ShellCommand(
        argv=tuple(argv),
        env={},
        private_dir_inside=Path(SANDBOX_HOME),
        rlimits=sandbox_rlimits(limits),
        cgroup=cgroup,
        sandboxed=True,
        files=files,
        user=user,
    )
    return _Limited(launch_argv(command, controlling_terminal=False), cgroup)


def resolve(
    name: str, config: MCPServerConfig, environ: Mapping[str, str], secrets: Secrets
) -> MCPServerConfig:
    """``config`` with each ``${VAR}`` replaced by its value in ``environ``; each value is
    registered with ``secrets`` under its variable's name (masked in what tools return, never
    exported to the terminal). ``MCPConfigError`` naming a variable that is not set."""
    missing = [variable for variable in config.references() if not environ.get(variable)]
    if missing:
        raise MCPConfigError(
            f"MCP server {name!r} cannot start: "
            f"{', '.join('${' + variable + '}' for variable in missing)} not set in the "
            "environment of the process running this conversation"
        )
    for variable in config.references():
        value = environ[variable]
        if len(value) >= MIN_SECRET_LENGTH and variable not in secrets:
            secrets.add(variable, value, export=False)

    def filled(text: str) -> str:
        return VARIABLE_REFERENCE.sub(lambda match: environ[match.group(1)], text)

    if not config.references():
        return config
    return config.model_copy(
        update={
            "command": filled(config.command) if config.command else None,
            "args": tuple(filled(arg) for arg in config.args),
            "env": {key: filled(value) for key, value in config.env.items()},
            "cwd": filled(config.cwd) if config.cwd else None,
            "url": filled(config.url) if config.url else None,
            "headers": {key: filled(value) for key, value in config.headers.items()},
        }
    )


def _executable(name: str, command: str, environ: Mapping[str, str]) -> Path:
    """The command's absolute path (looked up on the PATH of ``environ`` when it has no
    slash), so that its own files can be shown in the sandbox."""
    found = command if "/" in command else shutil.which(command, path=environ.get("PATH"))
    if found is None or not os.access(found, os.X_OK):
        raise MCPConfigError(
            f"MCP server {name!r} cannot start: command {command!r} not found or not executable"
        )
    return Path(os.path.abspath(found))


def _mounts(
    executable: Path,
    config: MCPServerConfig,
    extra: bool,
    mounts_ro: Sequence[str],
    workspace: Path,
) -> list[str]:
    """Host paths shown read-only: the conversation's own ``mounts_ro``; unless ``extra`` is
    off, the executable (its installation prefix, e.g. a virtual environment, when it lies in
    a ``bin`` folder), the absolute paths among the arguments that exist and the working
    folder. The workspace (read-write) and the system are shown anyway."""
    chosen: list[str] = list(mounts_ro)
    if not extra:
        return chosen
    candidates = [executable, Path(os.path.realpath(executable))]
    candidates = [path.parent.parent if path.parent.name == "bin" else path for path in candidates]
    candidates += [Path(arg) for arg in config.args if arg.startswith("/")]
    candidates += [Path(config.cwd)] if config.cwd else []
    for path in candidates:
        text = str(path)
        inside = text == str(workspace) or text.startswith(f"{workspace}/")
        if path.exists() and not _under_system(text) and not inside and text not in chosen:
            chosen.append(text)
    return chosen


def _under_system(path: str) -> bool:
    return _under(path, SYSTEM_DIRS)


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in folders)


def _visible(executable: Path, workspace: Path, mounts_ro: Sequence[str]) -> bool:
    """The command is shown in the sandbox without mounting anything for it."""
    return _under(str(executable), [*SYSTEM_DIRS, str(workspace), *mounts_ro])


def sandbox_argv(
    executable: Path,
    args: Sequence[str],
    *,
    workspace: Path,
    cwd: str | None,
    network: str,
    mounts: Sequence[str],
    tmpfs_size: int,
    bwrap: str = BWRAP,
) -> list[str]:
    """bubblewrap's command line for a stdio server: the sandbox's own layers
    (``workspace.sandbox.bwrap_argv``), with ``mounts`` read-only, starting in ``cwd`` (default
    the workspace); the host's network only when ``network`` is ``on`` (an allow list keeps a
    namespace of its own, reached through a proxy)."""
    layout = SandboxLayout(
        workspace=workspace,
        network=network,
        mounts_ro=mounts,
        tmpfs_bytes=tmpfs_size,
        chdir=cwd,
    )
    return [*bwrap_argv(layout, bwrap), str(executable), *args]
