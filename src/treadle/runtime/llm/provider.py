"""What every client of a real provider shares, whichever library carries the request (LiteLLM
for named providers, the ``openai`` package for OpenAI-compatible base URLs): how the model is
reached (``ModelSettings``), the retry policy and its deadline (``call_with_retries``), a
failure said in words (``describe``), and a provider's answer read into a ``ModelResponse``
(``read_response``). One place for each: the clients only map their library's errors and
objects onto these.

Rate limits and transient errors are retried with exponential backoff (or the provider's
Retry-After, within the deadline) inside one total deadline per model call; each retry is
announced. The API key is never in a repr, a log line, an error or a kept response.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from treadle.events.model import TokenUsage
from treadle.runtime.llm.base import (
    ContextWindowExceeded,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from treadle.runtime.text import storable_text

logger = logging.getLogger(__name__)

RAW_RESPONSE_LIMIT = 64 * 1024
"""How much of a response the runtime could not use is kept with its error (characters)."""

DEADLINE_ENV = "TREADLE_MODEL_DEADLINE"

RESPONSE_LIMIT = 32 * 1024 * 1024
"""The most bytes of one answer's body a client reads (``ModelSettings.max_response_bytes``):
an answer is a few KB, long contexts with logprobs a few MB; past this the endpoint is
misbehaving, and the body is refused unread rather than held (``guard.py``)."""

MAX_TOOL_CALLS = 256
"""The most tool calls one response may carry: each becomes a stored action of the run."""

KEY_SHOWN_AS = "<the API key>"
"""What the key is replaced by wherever a provider's words would show it (one that echoes it)."""


@dataclass(frozen=True)
class ModelEnvironment:
    """What this process's environment says about the model (TREADLE_MODEL, TREADLE_BASE_URL,
    TREADLE_API_KEY, TREADLE_MODEL_DEADLINE), read at the edge (``treadle.environment``) and
    given to the runtime, which never reads the environment itself. Empty: nothing set."""

    model: str | None = None
    """The default model when settings name none."""
    base_url: str | None = None
    """The operator's base URL: the default one, and always allowed the key."""
    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or traceback
    deadline: str | None = None
    """``DEADLINE_ENV`` as written: checked when a model is built without a deadline of its
    own, so a bad value fails only the runs that would use it."""


@dataclass(frozen=True)
class ModelSettings:
    """How to reach the model. The API key is used for calls only: never stored or logged."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or traceback
    max_retries: int = 4
    timeout_s: float = 120.0
    """Longest time for one attempt, its whole answer included (not only each read: a body
    trickling a byte at a time ends there too, on the OpenAI-compatible client)."""
    deadline_s: float = 600.0
    """Longest time one model call may take, every attempt and wait between them included."""
    temperature: float | None = None
    max_response_bytes: int = RESPONSE_LIMIT
    """The most bytes of one answer's body (``RESPONSE_LIMIT``)."""

    @classmethod
    def resolve(
        cls,
        environment: ModelEnvironment,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        deadline_s: float | None = None,
        *,
        key_base_urls: Collection[str] | None = None,
    ) -> ModelSettings:
        """Options first, then what ``environment`` (read by the caller, at its edge) says.

        ``key_base_urls`` (a server passes its operator's list): the base URLs this process's
        key may go to besides the provider's own endpoint and the operator's base URL; any other
        ``base_url`` gets no key. None: the key goes wherever ``base_url`` says (the user's run).
        """
        chosen = model or environment.model
        if not chosen:
            raise ModelError(
                "no model given: pass --model (e.g. openai/gpt-4o-mini, or openai/NAME with "
                "--base-url for an OpenAI-compatible server) or set TREADLE_MODEL"
            )
        if deadline_s is None:
            deadline_s = _parse_deadline(environment.deadline)
        operator_url = environment.base_url or None
        key = api_key or environment.api_key
        if base_url and key_base_urls is not None:
            allowed = {normalize_base_url(url) for url in [*key_base_urls, operator_url] if url}
            if normalize_base_url(base_url) not in allowed:
                key = None  # a base URL the operator did not allow never sees the key
        settings = cls(model=chosen, base_url=base_url or operator_url, api_key=key)
        return settings if deadline_s is None else replace(settings, deadline_s=deadline_s)

    def public(self) -> dict[str, Any]:
        """What may be stored with a conversation (no key)."""
        return {"model": self.model, "base_url": self.base_url}

    @property
    def where(self) -> str:
        """The provider as an error names it: the base URL, else "the provider"."""
        return self.base_url or "the provider"

    def attempt_timeout(self, remaining_s: float) -> float:
        """The wait for one attempt: ``timeout_s``, never past the call's deadline."""
        return max(0.001, min(self.timeout_s, remaining_s))


def normalize_base_url(url: str) -> str:
    """``url`` compared as the endpoint it names: scheme and host lower-case, default port and
    trailing slashes dropped. Exact match only: a prefix would let ``https://api.x.com.evil``
    through."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, default) else f"{host}:{port}"
    if parts.username or parts.password:
        netloc = f"{parts.username or ''}:{parts.password or ''}@{netloc}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}" + (
        f"?{parts.query}" if parts.query else ""
    )


def _parse_deadline(text: str | None) -> float | None:
    """``DEADLINE_ENV``'s value in seconds (None: not set); a ModelError naming it if bad."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ModelError(f"{DEADLINE_ENV}={text!r} is not a positive number of seconds")
    return value


RetryNotice = Callable[[str], None]
"""Told, in words, each time a model call is retried and why (e.g. the CLI prints it)."""


class ProviderModel:
    """A ``LanguageModel`` that calls a real provider with ``settings``: what both clients
    (``LiteLLMModel``, ``OpenAICompatibleModel``) offer besides ``complete``. The condenser
    asks it for the model's input window and its token counts; ``close`` frees what it holds
    (its owner calls it: the conversation's parts that built it, or whoever gave it)."""

    def __init__(
        self,
        settings: ModelSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: RetryNotice | None = None,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self.on_retry: RetryNotice = on_retry or logger.warning

    @property
    def name(self) -> str:
        return self.settings.model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"  # the settings' repr has no key

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    def context_window(self) -> int | None:
        """The model's input window in tokens (None: not known)."""
        raise NotImplementedError

    def count_tokens(self, text: str) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Free what the client holds (its connections); nothing to free by default."""


# -- one call, its attempts and the waits between them --------------------------------------

FailureKind = Literal["transient", "context", "auth", "refused", "unusable"]


@dataclass(frozen=True, slots=True)
class Failure:
    """One attempt's failure, as a client maps its library's error: ``transient`` (a rate limit,
    a 5xx, a timeout, a cut connection, a body that is not JSON: retried), ``context`` (the
    prompt is longer than the window), ``auth`` (the key), ``refused`` (any other refusal: asking
    again gets the same answer), ``unusable`` (an answer the runtime will not read: past the
    size limit, compressed, JSON nested too deeply; not retried either). ``reason`` in words (``describe``); ``asked_wait``: the
    seconds the provider's Retry-After asked for."""

    kind: FailureKind
    reason: str
    asked_wait: float | None = None


T = TypeVar("T")


def call_with_retries(
    model: ProviderModel,
    attempt: Callable[[float], T],
    failure: Callable[[Exception], Failure | None],
) -> T:
    """``attempt(timeout_s)`` until it answers, retrying what ``failure`` calls transient with
    backoff within ``model.settings``' retries and deadline; a ModelError (in words, without
    the key, no exception chained) for what cannot be answered. An error ``failure`` does not
    know (None) is raised as it is."""
    settings = model.settings
    deadline = time.monotonic() + settings.deadline_s
    number = 0
    while True:
        number += 1
        try:
            return attempt(settings.attempt_timeout(deadline - time.monotonic()))
        except Exception as error:
            found = failure(error)
            if found is None:
                raise
        # Out of the except block: nothing the library raised is chained to what follows.
        reason = hide_key(found.reason, settings.api_key)
        if found.kind == "context":
            raise ContextWindowExceeded(
                f"model {model.name} refused the request: its context window is exceeded ({reason})"
            )
        if found.kind == "auth":
            raise ModelError(
                f"model {model.name}: authentication failed ({reason}); check TREADLE_API_KEY"
            )
        if found.kind == "refused":
            raise ModelError(f"model {model.name} refused the request: {reason}")
        if found.kind == "unusable":
            raise ModelError(f"model {model.name} sent a response the runtime cannot use: {reason}")
        # Exponential backoff with jitter spreads the retries of many conversations; the
        # provider's Retry-After, when it sends one, is the least we wait.
        asked = found.asked_wait
        wait = max(min(30.0, 0.5 * 2 ** (number - 1)) * (0.5 + random.random()), asked or 0)
        left = deadline - time.monotonic()
        if number > settings.max_retries:
            raise ModelError(f"model {model.name} failed after {number} attempts: {reason}")
        if wait >= left:
            if asked:
                reason += f" (it asked to wait {asked:g} s)"
            raise ModelError(
                f"model {model.name} gave no usable answer within its deadline of "
                f"{settings.deadline_s:g} s ({number} attempt{'s' if number > 1 else ''}): "
                f"{reason}"
            )
        model.on_retry(
            f"model {model.name}: {reason}; retrying in {wait:.1f} s"
            f"{' as the provider asked' if asked else ''} "
            f"(attempt {number + 1} of {settings.max_retries + 1})"
        )
        model._sleep(wait)


def describe(
    where: str,
    text: str,
    *,
    status: int | None = None,
    timed_out: bool = False,
    cut: bool = False,
    not_json: bool = False,
    too_deep: bool = False,
) -> str:
    """What went wrong, in words (no exception class names or Python object reprs): ``text``
    is the provider's own message (``short``), ``where`` the provider (``ModelSettings.where``)."""
    if too_deep:  # json.loads recurses per level: a RecursionError, not a crash, says it
        return f"{where} answered with JSON nested too deeply to read"
    if not_json:
        return f"{where} answered with a body that is not JSON (not an OpenAI-compatible answer)"
    if timed_out:
        return f"no answer from {where} in time"
    if cut:
        return f"the connection to {where} failed or was cut before an answer"
    if status == 429:
        return f"rate limited by {where} (HTTP 429): {text}"
    return f"HTTP {status} from {where}: {text}" if status is not None else text


def says_context_exceeded(status: int | None, code: object, text: str) -> bool:
    """A 400 whose error code or text says the prompt is too long."""
    return status == 400 and (
        code == "context_length_exceeded" or "context_length_exceeded" in text
    )


def retry_after(headers: Any) -> float | None:
    """The seconds a provider asked us to wait (Retry-After: seconds or an HTTP date)."""
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds) if seconds == seconds else None  # NaN is no answer


_PREFIX = re.compile(
    r"^\s*(?:(?:litellm\.)?\w+(?:Error|Exception)\s*(?::|\s-)|Error code: \d+ -)\s*"
)
_REPR = re.compile(r",?\s*\w[\w ]*-\s*<[^<>]*(?:<[^<>]*>[^<>]*)*>|<[^<>]*(?:<[^<>]*>[^<>]*)*>")


def short(message: object) -> str:
    """The first line of a provider's message, without the prefixes libraries stack up
    ("litellm.InternalServerError: InternalServerError: OpenAIException - ...", "Error code:
    429 - ..."), a traceback or object reprs; at most 300 characters."""
    text = str(message).strip()
    first = text.splitlines()[0] if text else ""
    first = first.split("Traceback (most recent call last)", 1)[0]  # LiteLLM's, at times
    while (stripped := _PREFIX.sub("", first, count=1)) != first:
        first = stripped
    first = _REPR.sub("", first).strip(" ,")
    return storable_text(first[:300]) or "no details given"


def hide_key(text: str, key: str | None) -> str:
    """``text`` with the key replaced (a provider may echo what it was sent)."""
    return text.replace(key, KEY_SHOWN_AS) if key and len(key) >= 4 else text


# -- the answer -------------------------------------------------------------------------------


def read_response(
    model: ProviderModel, raw: Any, cost: Callable[[Any], float] = lambda _raw: 0.0
) -> ModelResponse:
    """A provider's chat completion (an object whose fields are attributes, as both libraries
    build it) as the runtime's type, priced by ``cost``; a ModelError keeping the response
    (``raw_text``) for what cannot be one, a shape nobody foresaw included."""
    try:
        return _read(model, raw, cost)
    except ModelError:
        raise
    except Exception as error:  # a shape nobody foresaw: still the model's error
        problem = f"{type(error).__name__}: {error}"
    raise bad_response(model, raw, problem)


def _read(model: ProviderModel, raw: Any, cost: Callable[[Any], float]) -> ModelResponse:
    choices = getattr(raw, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    if message is None:
        raise bad_response(model, raw, 'it has no choice to read ("choices" is empty)')
    listed = getattr(message, "tool_calls", None) or ()
    if len(listed) > MAX_TOOL_CALLS:
        raise bad_response(
            model, raw, f"it has {len(listed)} tool calls, more than the {MAX_TOOL_CALLS} allowed"
        )
    calls = []
    for number, call in enumerate(listed, start=1):
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        call_id = getattr(call, "id", None)
        if not isinstance(call_id, str) or not call_id.strip():
            raise bad_response(model, raw, f"tool call {number} ({name}) has an empty id")
        if not isinstance(name, str) or not name:
            raise bad_response(model, raw, f"tool call {number} ({call_id}) has no tool name")
        arguments = getattr(function, "arguments", None)
        calls.append(
            ToolCall(
                id=storable_text(call_id),
                name=storable_text(name),
                arguments=storable_text(
                    arguments
                    if isinstance(arguments, str)
                    else ""
                    if arguments is None
                    else json.dumps(arguments, default=_json_value)
                ),
            )
        )
    usage = getattr(raw, "usage", None)
    try:
        cost_usd = float(cost(raw) or 0.0)
    except Exception:  # unknown model or price: cost is unknown, not an error
        cost_usd = 0.0
    response_id = getattr(raw, "id", None)
    reasoning = getattr(message, "reasoning_content", None)
    content = getattr(message, "content", None)
    return ModelResponse(
        # The id only groups one response's calls: a provider that sends none gets one.
        id=storable_text(response_id)
        if isinstance(response_id, str) and response_id
        else f"response-{uuid.uuid4().hex[:12]}",
        text=storable_text(content) if isinstance(content, str) else "",
        reasoning=storable_text(reasoning) if isinstance(reasoning, str) and reasoning else None,
        tool_calls=tuple(calls),
        usage=TokenUsage(
            model=model.settings.model,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cost_usd=cost_usd,
        ),
    )


def _json_value(value: Any) -> Any:
    """A value read by attribute (the OpenAI-compatible client's ``Answer``) as plain JSON."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    raise TypeError(f"{type(value).__name__} is not JSON")


def bad_response(model: ProviderModel, raw: Any, problem: str) -> ModelError:
    return ModelError(
        hide_key(
            f"model {model.name} sent a response the runtime cannot use: {problem}",
            model.settings.api_key,
        ),
        raw=hide_key(raw_text(raw), model.settings.api_key),
    )


def raw_text(raw: Any) -> str:
    """A response as JSON text for the user to read (cut at ``RAW_RESPONSE_LIMIT``)."""
    try:
        text = raw.model_dump_json() if hasattr(raw, "model_dump_json") else str(raw)
    except Exception:  # a half-built response object: its repr is all there is
        text = repr(raw)
    text = storable_text(text)
    return text if len(text) <= RAW_RESPONSE_LIMIT else text[:RAW_RESPONSE_LIMIT] + "…(cut)"
