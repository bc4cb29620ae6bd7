"""``/docs``: the API's reference as one page drawn here from the OpenAPI document, with no
script and nothing fetched from elsewhere.

FastAPI's own ``/docs`` (Swagger UI) and ``/redoc`` load their code from a CDN: offline (an
air-gapped server, this project's CI) they show a blank page, and a page that runs a third
party's script beside the API key is not one this server serves. ``/openapi.json`` stays the
machine-readable form, for tools that draw their own.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse

from treadle.server.routes_web import HEADERS

router = APIRouter(include_in_schema=False)

METHODS = ("get", "post", "put", "patch", "delete")


@router.get("/docs")
def api_docs(request: Request) -> HTMLResponse:
    app: FastAPI = request.app
    return HTMLResponse(reference_page(app.openapi()), headers=HEADERS)


def reference_page(spec: dict[str, Any]) -> str:
    """Every operation of ``spec`` by tag: method, path, summary, parameters, body, answers."""
    info = spec.get("info", {})
    by_tag: dict[str, list[str]] = {}
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if operation is not None:
                tag = (operation.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append(_operation(method, path, operation))
    sections = "".join(
        f"<section><h2>{_text(tag)}</h2>{''.join(parts)}</section>"
        for tag, parts in sorted(by_tag.items())
    )
    title = _text(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{title}</title></head>"
        f"<body><h1>{title}</h1><p>{_text(info.get('description', ''))}</p>"
        '<p>The whole document, for tools: <a href="/openapi.json">/openapi.json</a>.</p>'
        f"{sections}</body></html>"
    )


def _operation(method: str, path: str, operation: dict[str, Any]) -> str:
    parameters = [
        f"<li><code>{_text(p.get('name', ''))}</code> ({_text(p.get('in', ''))}"
        f"{', required' if p.get('required') else ''}) {_text(p.get('description', ''))}</li>"
        for p in operation.get("parameters", [])
    ]
    body = operation.get("requestBody", {}).get("content", {})
    bodies = [
        f"<li>body {_text(kind)}: <code>{_text(_schema_name(media.get('schema', {})))}</code></li>"
        for kind, media in body.items()
    ]
    answers = [
        f"<li>{_text(code)}: {_text(answer.get('description', ''))}</li>"
        for code, answer in operation.get("responses", {}).items()
    ]
    summary = operation.get("summary") or operation.get("operationId", "")
    return (
        f"<article><h3><code>{method.upper()} {_text(path)}</code></h3>"
        f"<p>{_text(summary)}</p><p>{_text(operation.get('description', ''))}</p>"
        f"<ul>{''.join(parameters + bodies + answers)}</ul></article>"
    )


def _schema_name(schema: dict[str, Any]) -> str:
    reference = schema.get("$ref", "")
    return reference.rsplit("/", 1)[-1] if reference else str(schema.get("type", "JSON"))


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)
