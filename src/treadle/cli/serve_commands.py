"""``treadle serve``: the agent server on 127.0.0.1 by default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from treadle.cli.app import app
from treadle.cli.mcp_options import mcp_servers_option
from treadle.cli.run_commands import Network, SandboxKind
from treadle.cli.store_options import StoreOption
from treadle.files import read_regular_file
from treadle.runtime.hooks import HookSettingsError, read_hook_file
from treadle.runtime.settings import SandboxSettings
from treadle.server.limits import MAX_BODY_BYTES, MAX_RUNNING
from treadle.store.openhands.transfer import ArchiveLimits


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
        int,
        typer.Option("--max-archive-bytes", min=1, help="Bytes one imported archive may unpack to"),
    ] = ArchiveLimits.max_bytes,
    max_archive_members: Annotated[
        int,
        typer.Option(
            "--max-archive-members", min=1, help="Files and folders one imported archive may hold"
        ),
    ] = ArchiveLimits.max_members,
    max_running: Annotated[
        int,
        typer.Option(
            "--max-running", min=1, help="Conversations running at once here (429 past it)"
        ),
    ] = MAX_RUNNING,
    sandbox: Annotated[
        SandboxKind,
        typer.Option(
            "--sandbox",
            help="The least isolation a conversation may ask for: bubblewrap (clients cannot "
            "ask for none) or none (any)",
        ),
    ] = SandboxKind.bubblewrap,
    network: Annotated[
        Network,
        typer.Option(
            "--network", help="off: clients cannot turn the sandbox's network on; on: they may"
        ),
    ] = Network.off,
    mount_ro: Annotated[
        list[Path] | None,
        typer.Option(
            "--mount-ro",
            help="A host path clients may show read-only in their sandbox (repeatable)",
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

    from treadle.server import create_app

    try:
        sandbox_limit = SandboxSettings(
            kind=sandbox.value,
            network=network.value,
            mounts_ro=tuple(str(path.resolve()) for path in mount_ro or ()),
        )
    except ValidationError as error:
        raise typer.BadParameter(error.errors()[0]["msg"], param_hint="--mount-ro") from None
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
    application = create_app(
        store,
        api_keys=keys,
        bind_host=host,
        allowed_hosts=allowed_host or (),
        lease_ttl_s=lease_ttl,
        workspace_root=workspace_root,
        allow_base_urls=allow_base_url or (),
        idle_timeout_s=idle_timeout,
        max_body_bytes=max_body_bytes,
        archive_limits=ArchiveLimits(max_bytes=max_archive_bytes, max_members=max_archive_members),
        max_running=max_running,
        sandbox_limit=sandbox_limit,
        hooks=operator_hooks,
        mcp_servers=mcp_servers,
    )
    uvicorn.run(application, host=host, port=port, log_level="info", ws="websockets-sansio")


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
