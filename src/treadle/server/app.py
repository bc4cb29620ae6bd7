"""The agent server: a FastAPI app over one store, the canonical API for clients and the Canvas.

``create_app`` wires the store, the run manager (leases), the stream hubs, security and routes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

import treadle
from treadle.data.hooks import HookSettings
from treadle.data.mcp import MCPServerConfig
from treadle.environment import model_environment, shell_environment
from treadle.runtime.settings import HostAllows, HostProvides, SandboxSettings, SettingsPolicy
from treadle.runtime.tools.terminal_folders import sweep_quietly
from treadle.runtime.workspace.sandbox_user import SandboxUser
from treadle.server import (
    api_docs,
    routes_conversations,
    routes_evals,
    routes_events,
    routes_interop,
    routes_web,
)
from treadle.server.errors import install_error_handlers
from treadle.server.limits import MAX_RUNNING
from treadle.server.live_relay import LiveRelay
from treadle.server.openhands import HEALTH_PATH as OPENHANDS_HEALTH_PATH
from treadle.server.openhands import PREFIX as OPENHANDS_PREFIX
from treadle.server.openhands import OpenHandsState, openhands_router
from treadle.server.runs import DEFAULT_IDLE_TIMEOUT_S, RunManager
from treadle.server.security import PUBLIC_PATHS, SecurityConfig, SecurityMiddleware
from treadle.server.state import ServerState
from treadle.server.stream import Hubs
from treadle.server.workers.routing import WorkerPlace
from treadle.store.leases import open_leases
from treadle.store.openhands.transfer import ArchiveLimits
from treadle.store.urls import default_store_dir, default_store_url, open_store

assert OPENHANDS_HEALTH_PATH in PUBLIC_PATHS  # the front of --workers N checks them too


def create_app(
    store_url: str | None = None,
    *,
    api_keys: Iterable[str] = (),
    bind_host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
    lease_ttl_s: float = 10.0,
    workspace_root: str | Path | None = None,
    allow_base_urls: Iterable[str] = (),
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    max_body_bytes: int | None = None,
    archive_limits: ArchiveLimits | None = None,
    max_running: int = MAX_RUNNING,
    sandbox_limit: SandboxSettings | None = None,
    hooks: HookSettings | None = None,
    mcp_servers: Mapping[str, MCPServerConfig] | None = None,
    sandbox_user: SandboxUser | None = None,
    worker: WorkerPlace | None = None,
) -> FastAPI:
    """``allow_base_urls``: base URLs (besides the provider's own endpoint and TREADLE_BASE_URL)
    that may receive the server's model key; a conversation with any other runs without it.
    ``sandbox_limit``: the least isolation a client's settings may ask for (default: the
    default sandbox, bubblewrap with the network off; a client asking for less gets 403).
    ``hooks``: the operator's hooks, run in every conversation (docs/hooks.md).
    ``mcp_servers``: the operator's MCP servers, which every conversation here gets.
    ``sandbox_user``: the host user sandboxes run as when the server is root (conversation
    workspaces made here are given to it); None: each workspace's owner (docs/sandbox.md).
    ``worker``: this app is that worker of a ``treadle serve --workers N`` (server/workers/):
    its runs' leases name the server's group, and it takes over the crashed runs routed to it."""
    url = store_url or default_store_url()
    security = SecurityConfig.build(
        api_keys,
        bind_host=bind_host,
        extra_hosts=allowed_hosts,
        max_body_bytes=max_body_bytes,
        public_paths=PUBLIC_PATHS,
    )

    root = Path(workspace_root).resolve() if workspace_root else None
    # The server's edge: the environment is read here, once; the runtime is given the values
    # (it masks the key and sends it only where the policy allows).
    environment = model_environment()
    # Settings come from clients: untrusted (script files only inside the root, the key only
    # to the provider or to the operator's base URLs).
    policy = SettingsPolicy(
        allows=HostAllows(
            trusted=False,
            workspace_root=root,
            key_base_urls=tuple(allow_base_urls),
            sandbox_limit=sandbox_limit or SandboxSettings(),
        ),
        provides=HostProvides(
            # The keys clients authenticate with are masked in every conversation's tool output.
            masked=security.api_keys,
            model_environment=environment,
            # Snapshots of a store without a file of its own (PostgreSQL) live in this folder.
            snapshot_data_dir=default_store_dir(),
            sandbox_user=sandbox_user,
            shell_environment=shell_environment(),
            hooks=hooks,
            mcp_servers=dict(mcp_servers or {}),
            # Only the operator's servers may name its variables (a client's ${VAR} is refused).
            mcp_environment=dict(os.environ) if mcp_servers else None,
        ),
    )
    model_key = environment.api_key

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = open_store(url)
        sweep_quietly()  # terminal folders and cgroups a killed process left behind
        hubs = Hubs(store)
        relay = LiveRelay(store, hubs)  # commands' output as they run, to the stream
        runs = RunManager(
            store,
            open_leases(url),
            lease_ttl_s=lease_ttl_s,
            policy=policy,
            idle_timeout_s=idle_timeout_s,
            max_running=max_running,
            model_key=model_key,
            live_output=relay,
            owner_group=worker.group if worker else None,
            takes_over=worker.serves if worker else None,
            shared_limit=worker.run_slots(max_running) if worker else None,
        )
        # The OpenHands API's clients' model keys, held here only (server/openhands/keys.py).
        runs.policy_for = app.state.openhands.keys.policy_for(store)
        app.state.treadle = ServerState(
            store=store,
            runs=runs,
            security=security,
            hubs=hubs,
            workspace_root=root,
            policy=policy,
            archive_limits=archive_limits or ArchiveLimits(),
        )
        try:
            yield
        finally:
            app.state.openhands.commands.close()
            runs.shutdown()
            relay.close()
            store.close()

    app = FastAPI(
        title="Treadle agent server",
        version=treadle.__version__,
        description="Conversations, events (search, count, path, projection, audit, live "
        "stream with gap-free resume by seq) and the user's intents. Auth: "
        "`Authorization: Bearer KEY` when keys are configured.",
        lifespan=lifespan,
        docs_url=None,  # server/api_docs.py draws /docs itself: Swagger UI loads from a CDN
        redoc_url=None,
    )
    install_error_handlers(app)
    app.state.openhands = OpenHandsState()
    # The OpenHands SDK's own client drives this prefix (docs/openhands.md).
    app.include_router(openhands_router(), prefix=OPENHANDS_PREFIX)
    app.include_router(routes_interop.router)  # before /{conversation_id} routes
    app.include_router(routes_conversations.router)
    app.include_router(routes_evals.router)
    app.include_router(routes_events.router)
    app.include_router(routes_web.router)
    app.include_router(api_docs.router)

    @app.get("/health", tags=["server"])
    def health() -> dict[str, str]:
        return {"status": "ok", "version": treadle.__version__}

    app.add_middleware(SecurityMiddleware, config=security)
    return app
