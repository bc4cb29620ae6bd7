"""``treadle serve``: the agent server on 127.0.0.1 by default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from treadle.cli.app import app
from treadle.cli.store_options import StoreOption


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Interface to bind (keep 127.0.0.1 unless you set keys)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    store: StoreOption = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help="Accepted API key (repeatable; or TREADLE_API_KEYS)"),
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
) -> None:
    """Serve the REST + WebSocket API (and the Canvas at /). OpenAPI docs at /docs."""
    import uvicorn

    from treadle.server import create_app

    application = create_app(
        store,
        api_keys=api_key or (),
        bind_host=host,
        allowed_hosts=allowed_host or (),
        lease_ttl_s=lease_ttl,
        workspace_root=workspace_root,
    )
    uvicorn.run(application, host=host, port=port, log_level="info", ws="websockets-sansio")
