"""JSON Schema of a tool's arguments as providers accept it: refs inlined, titles dropped,
and a one-line summary of the parameters for error messages."""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

from pydantic import BaseModel

_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()
"""Each arguments model's cleaned schema as JSON, made once: pydantic builds it anew on each
call (milliseconds), and every conversation's tools send it. A copy is parsed from the JSON
(several times cheaper than ``copy.deepcopy`` of the dict). Weak: a model made at run time (a
tool added later) goes with its class."""
_SCHEMAS_LOCK = threading.Lock()


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema with ``$defs`` inlined (several providers reject ``$ref``) and
    pydantic's generated titles removed (noise in the prompt); a copy of its own."""
    with _SCHEMAS_LOCK:
        cached = _SCHEMAS.get(model)
    if cached is None:
        schema = model.model_json_schema()
        definitions = schema.pop("$defs", {})
        cached = json.dumps(_clean(schema, definitions, ()), ensure_ascii=False)
        with _SCHEMAS_LOCK:
            _SCHEMAS[model] = cached
    copied: dict[str, Any] = json.loads(cached)  # the caller may change its copy
    return copied


def _clean(node: Any, definitions: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_clean(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen:
            raise ValueError(f"recursive model {name!r} cannot be inlined in a tool schema")
        target = dict(definitions[name])
        target.update({key: value for key, value in node.items() if key != "$ref"})
        return _clean(target, definitions, (*seen, name))
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        # A string "title" is pydantic's annotation; a property named "title" maps to a dict.
        if key == "title" and isinstance(value, str):
            continue
        cleaned[key] = _clean(value, definitions, seen)
    return cleaned


def parameters_summary(schema: dict[str, Any]) -> str:
    """``command*, path*, view_range`` style list of the parameters (``*``: required)."""
    required = set(schema.get("required", ()))
    names = [f"{name}*" if name in required else name for name in schema.get("properties", {})]
    if not names:
        return "no parameters"
    return ", ".join(names) + (" (* = required)" if required else "")
