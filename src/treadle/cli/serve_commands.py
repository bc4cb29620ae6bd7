"""``treadle serve``: the agent server on 127.0.0.1 by default."""

from __future__ import annotations

import errno
import faulthandler
import ipaddress
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import typer

from treadle.cli.mcp_options import mcp_servers_option
from treadle.cli.output import EXIT_BAD_INPUT, fail
from treadle.cli.root import app
from treadle.cli.run_commands import SandboxKind, network_option
from treadle.cli.store_options import StoreOption
from treadle.files import read_regular_file
from treadle.server.limits import (
    MAX_BODY_BYTES,
    MAX_RUNNING,
    default_workers,
    workers_for_sessions,
)

if TYPE_CHECKING:
    from treadle.runtime.workspace.sandbox_user import SandboxUser

DEFAULT_SERVER_USER_SHOWN = "nobody"
"""``treadle.runtime.workspace.sandbox_user.DEFAULT_SERVER_USER`` as --help names it, without
loading the sandbox code (tests/cli/test_startup.py checks they are the same)."""
ARCHIVE_BYTES_SHOWN = "268435456"
ARCHIVE_MEMBERS_SHOWN = "110000"
"""``ArchiveLimits``'s defaults as --help shows them, without loading the import code that
defines them (tests/cli/test_startup.py checks they are the same)."""


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Interface to bind (keep 127.0.0.1 unless you set keys)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    store: StoreOption = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            help="Accepted API key (repeatable; or TREADLE_API_KEYS). Visible to other local "
            "users in the process list: prefer --api-key-file",
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file", help="File of accepted API keys, one per line (kept out of argv)"
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option("--allowed-host", help="Extra Host name to answer to (DNS-rebinding guard)"),
    ] = None,
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl", min=0.5, help="Seconds before a crashed server's runs are taken over"
        ),
    ] = 10.0,
    workspace_root: Annotated[
        Path | None,
        typer.Option(
            "--workspace-root", help="Only allow conversation workspaces inside this folder"
        ),
    ] = None,
    allow_base_url: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-base-url",
            help="A model base URL that may receive the server's TREADLE_API_KEY (repeatable); "
            "conversations with any other base URL run without the key",
        ),
    ] = None,
    idle_timeout: Annotated[
        float,
        typer.Option(
            "--idle-timeout",
            min=0,
            help="Seconds a conversation's shell and tools stay open after its last run or use "
            "(0: close them when its run ends)",
        ),
    ] = 300.0,
    max_body_bytes: Annotated[
        int,
        typer.Option("--max-body-bytes", min=1, help="Largest request body, counted as it arrives"),
    ] = MAX_BODY_BYTES,
    max_archive_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-archive-bytes",
            min=1,
            help="Bytes one imported archive may unpack to",
            show_default=ARCHIVE_BYTES_SHOWN,
        ),
    ] = None,
    max_archive_members: Annotated[
        int | None,
        typer.Option(
            "--max-archive-members",
            min=1,
            help="Files and folders one imported archive may hold",
            show_default=ARCHIVE_MEMBERS_SHOWN,
        ),
    ] = None,
    max_running: Annotated[
        int,
        typer.Option(
            "--max-running",
            min=1,
            help="Conversations running at once here, all workers together (429 past it)",
        ),
    ] = MAX_RUNNING,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="Processes that run conversations, behind this one (which owns the port); "
            "1: this process serves everything itself",
            show_default="two per core, fewer when memory is short",
        ),
    ] = None,
    sandbox: Annotated[
        SandboxKind,
        typer.Option(
            "--sandbox",
            help="The least isolation a conversation may ask for: bubblewrap (clients cannot "
            "ask for none) or none (any)",
        ),
    ] = SandboxKind.bubblewrap,
    network: Annotated[
        str,
        typer.Option(
            "--network",
            help="off: clients cannot turn the sandbox's network on; on: they may; "
            "allow=HOST[:PORT],...: they may ask for allow lists within this one",
            metavar="off|on|allow=HOST[:PORT],...",
            callback=network_option,
        ),
    ] = "off",
    mount_ro: Annotated[
        list[Path] | None,
        typer.Option(
            "--mount-ro",
            help="A host path clients may show read-only in their sandbox (repeatable)",
        ),
    ] = None,
    sandbox_user: Annotated[
        str | None,
        typer.Option(
            "--sandbox-user",
            help="The host user (name or uid) sandboxes run as when the server runs as root, "
            f"and who owns the conversation workspaces it makes (default: "
            f"{DEFAULT_SERVER_USER_SHOWN}; root keeps uid 0, without capabilities)",
        ),
    ] = None,
    hooks: Annotated[
        Path | None,
        typer.Option(
            "--hooks",
            help="Hooks (Claude Code's settings shape) every conversation here runs, in its "
            "sandbox; a client's own hooks run only sandboxed (docs/hooks.md)",
        ),
    ] = None,
    mcp_config: Annotated[
        Path | None,
        typer.Option(
            "--mcp-config",
            help='MCP servers every conversation here gets, from a {"mcpServers": ...} JSON '
            "file (docs/mcp.md); ${VAR} resolved from this server's environment",
        ),
    ] = None,
) -> None:
    """Serve the REST + WebSocket API (and the Canvas at /). OpenAPI docs at /docs.

    --sandbox, --network and --mount-ro are limits, not defaults: a conversation's settings
    asking for less isolation are refused (403); stricter ones are kept."""
    import uvicorn
    from pydantic import ValidationError

    from treadle.runtime.hooks import HookSettingsError, read_hook_file
    from treadle.runtime.settings import SandboxSettings
    from treadle.server import create_app
    from treadle.store.openhands.transfer import ArchiveLimits

    try:
        sandbox_limit = SandboxSettings(
            kind=sandbox.value,
            network=network,
            mounts_ro=tuple(str(path.resolve()) for path in mount_ro or ()),
        )
    except ValidationError as error:
        raise typer.BadParameter(error.errors()[0]["msg"], param_hint="--mount-ro") from None
    chosen_user = _sandbox_user(sandbox_user)
    operator_hooks = None
    if hooks is not None:
        try:
            operator_hooks = read_hook_file(hooks)
        except HookSettingsError as error:
            raise typer.BadParameter(str(error), param_hint="--hooks") from None
    mcp_servers = mcp_servers_option(mcp_config)
    keys = [*(api_key or ()), *(read_key_file(api_key_file) if api_key_file else ())]
    if not keys:
        keys = [k.strip() for k in os.environ.get("TREADLE_API_KEYS", "").split(",") if k.strip()]
    # Read once; out of the environment, so no child process (tool, MCP server) inherits it.
    os.environ.pop("TREADLE_API_KEYS", None)
    _check_before_start(host, port, workspace_root, keys)
    settings: dict[str, Any] = {
        "store_url": store,
        "api_keys": keys,
        "bind_host": host,
        "allowed_hosts": allowed_host or (),
        "lease_ttl_s": lease_ttl,
        "workspace_root": workspace_root,
        "allow_base_urls": allow_base_url or (),
        "idle_timeout_s": idle_timeout,
        "max_body_bytes": max_body_bytes,
        "archive_limits": ArchiveLimits(
            max_bytes=ArchiveLimits.max_bytes if max_archive_bytes is None else max_archive_bytes,
            max_members=(
                ArchiveLimits.max_members if max_archive_members is None else max_archive_members
            ),
        ),
        "max_running": max_running,
        "sandbox_limit": sandbox_limit,
        "hooks": operator_hooks,
        "mcp_servers": mcp_servers,
        "sandbox_user": chosen_user,
    }
    count = _worker_count(workers, store)
    _banner(host, port, store, keys, count)
    # `kill -USR1 PID` prints where every thread of the server waits (to its stderr): what an
    # operator, or a test whose run never ended, needs to see without stopping the server.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if count > 1:
        from treadle.server.workers.front import serve_front

        serve_front(host, port, settings, count)
        return
    application = create_app(**settings)
    uvicorn.run(application, host=host, port=port, log_level="info", ws="websockets-sansio")


def _worker_count(requested: int | None, store: str | None) -> int:
    """``--workers``, or the machine's default; on PostgreSQL no more than its free sessions
    hold (``limits.workers_for_sessions``), said on stderr when that changes or risks it."""
    if store is None or not store.startswith("postgres"):
        return requested or default_workers()
    from treadle.store.base import StoreError
    from treadle.store.postgres_schema import parse_postgres_url
    from treadle.store.postgres_sessions import free_sessions

    try:
        conninfo, _schema, _durability = parse_postgres_url(store)
    except StoreError:  # the store's own open says what is wrong with the URL
        return requested or default_workers()
    count, warning = workers_for_sessions(requested, free_sessions(conninfo))
    if warning:
        typer.echo(f"treadle serve: {warning}", err=True)
    return count


def _sandbox_user(given: str | None) -> SandboxUser | None:
    """``--sandbox-user``: as root, that user (default nobody); otherwise the server's own
    user is the only one its sandboxes can run as."""
    from treadle.runtime.workspace.sandbox_user import (
        DEFAULT_SERVER_USER,
        NOBODY_UID,
        SandboxUser,
        parse_sandbox_user,
    )

    if os.geteuid() != 0:
        if given is not None and parse_option_user(given).uid != os.geteuid():
            raise typer.BadParameter(
                "only a server run as root can start its sandboxes as another user; run it "
                "as that user instead",
                param_hint="--sandbox-user",
            )
        return None
    if given is None:
        try:
            return parse_sandbox_user(DEFAULT_SERVER_USER)
        except ValueError:  # no such name here: its usual uid
            return SandboxUser(NOBODY_UID, NOBODY_UID)
    return parse_option_user(given)


def parse_option_user(text: str) -> SandboxUser:
    from treadle.runtime.workspace.sandbox_user import parse_sandbox_user

    try:
        return parse_sandbox_user(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--sandbox-user") from None


def _check_before_start(host: str, port: int, workspace_root: Path | None, keys: list[str]) -> None:
    """One line and exit 2 for what uvicorn would report as a traceback or later; a warning
    for a server others can reach with no key."""
    if workspace_root is not None and not workspace_root.is_dir():
        fail(
            f"--workspace-root {workspace_root} is not a folder: create it, or leave the "
            "option out",
            EXIT_BAD_INPUT,
        )
    if port:
        try:
            with socket.create_server((host, port)):
                pass  # only asked whether it is free; uvicorn binds it again at once
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                fail(f"port {port} on {host} is in use: give another --port", EXIT_BAD_INPUT)
            fail(f"cannot listen on {host}:{port}: {error.strerror or error}", EXIT_BAD_INPUT)
    if not keys and not _loopback(host):
        typer.echo(
            f"warning: --host {host} can be reached from other machines and no API key is "
            "set: anyone who reaches it can run commands in its workspaces (give --api-key-file)",
            err=True,
        )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _without_password(url: str) -> str:
    """``url`` with the password of a ``postgresql://user:secret@host/db`` shown as ***."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _banner(host: str, port: int, store: str | None, keys: list[str], workers: int) -> None:
    from treadle.store.urls import default_store_url

    shown = f"[{host}]" if ":" in host else host
    where = f"http://{shown}:{port}/" if port else f"http://{shown}:<the port uvicorn names>/"
    auth = f"API keys ({len(keys)})" if keys else "none (no API key set)"
    typer.echo(f"Treadle server: Canvas at {where}", err=True)
    typer.echo(f"  store: {_without_password(store or default_store_url())}", err=True)
    typer.echo(f"  auth: {auth}", err=True)
    typer.echo(f"  workers: {workers}" + (" (this process only)" if workers == 1 else ""), err=True)


MAX_KEY_FILE_BYTES = 64 * 1024


def read_key_file(path: Path) -> list[str]:
    """The keys in ``path``: one per line, blank lines and ``#`` comments skipped."""
    try:
        text = read_regular_file(path, MAX_KEY_FILE_BYTES).decode("utf-8")
    except (OSError, ValueError) as error:
        raise typer.BadParameter(
            f"cannot read {path}: {error}", param_hint="--api-key-file"
        ) from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [key for key in keys if key and not key.startswith("#")]
    if not keys:
        raise typer.BadParameter(f"{path} holds no key", param_hint="--api-key-file")
    return keys
