"""The Canvas: ``/`` serves its page and ``/static/NAME`` its modules and styles, read from the
``treadle.web`` package (no CDN, nothing built), with a strict Content-Security-Policy.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, Response

from treadle.server.errors import ApiError

router = APIRouter(include_in_schema=False)

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

# Defence in depth behind the page's rule of showing every model and tool text as text: no
# inline script or handler can run, nothing loads from elsewhere, no other site may frame the
# page (a confirm button must never be clickable through someone else's page).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def web_files() -> dict[str, bytes]:
    """Every servable file of the package by name: a fixed set, so no path can escape it."""
    folder = resources.files("treadle.web")
    return {
        item.name: item.read_bytes()
        for item in folder.iterdir()
        if item.is_file() and any(item.name.endswith(suffix) for suffix in CONTENT_TYPES)
    }


def web_response(name: str) -> Response:
    body = web_files().get(name)
    if body is None:
        raise ApiError(404, "not_found", f"no Canvas file {name!r}")
    suffix = name[name.rfind(".") :]
    return Response(body, media_type=CONTENT_TYPES[suffix], headers=HEADERS)


# async: a cached file needs no worker thread (a thread hop per module slows the first load).
@router.get("/")
async def canvas_page() -> Response:
    return web_response("index.html")


@router.get("/favicon.ico")
async def favicon() -> Response:
    return web_response("favicon.svg")


@router.get("/static/{name}")
async def canvas_file(name: str) -> Response:
    return web_response(name)
