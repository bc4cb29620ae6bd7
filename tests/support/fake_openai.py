"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for tests of the real
LiteLLM path: it answers from a queue of scripted replies and records every request."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAIServer:
    """``replies`` items, one per request, in order:

    - ``{"text": ...}`` and/or ``{"tool_calls": [{"name", "arguments", "id"?}]}``: a completion;
    - ``{"status": 429|500|..., "retry_after": seconds?}``: an error (with a Retry-After header);
    - ``{"payload": {...}}``: this JSON body as is (e.g. ``{"choices": []}``);
    - ``{"body": "text"}``: a 200 whose body is this text (not JSON);
    - ``{"cut": True}``: the connection is closed without an answer;
    - ``{"hang": True}``: no answer until the server stops (a provider that never answers);
    - ``{"before": callable}``: called with the request body before answering (fault injection);
    - ``{"respond": callable}``: called with the request body, returns the reply to give (a
      server whose answer depends on the request, e.g. one that refuses long prompts);
    - ``{"status": 400, "error": {...}}``: an error with this OpenAI error object;
    - ``{"flood": bytes|None, "declare": bool?}``: a 200 whose body is this many bytes (None:
      endless), chunked, or with its Content-Length when ``declare``; what it managed to send
      before the client hung up is appended to ``sent``;
    - ``{"trickle": seconds}``: a 200 declaring a 1 MB body, then one byte per ``seconds``
      until the client hangs up (a body that never ends, each read on time);
    - ``{"gzip": payload}``: this JSON gzip-compressed, with ``Content-Encoding: gzip``.
    """

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.sent: list[int] = []
        self.sent_done = threading.Event()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    reply = (
                        server.replies.pop(0) if server.replies else {"text": "(no more replies)"}
                    )
                    number = len(server.requests)
                before: Callable[[dict[str, Any]], None] | None = reply.get("before")
                if before is not None:
                    before(body)
                respond: Callable[[dict[str, Any]], dict[str, Any]] | None = reply.get("respond")
                if respond is not None:
                    reply = respond(body)
                if reply.get("hang"):
                    server._stopping.wait()
                    return
                if reply.get("cut"):
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if "flood" in reply:
                    self._flood(reply["flood"], declare=reply.get("declare", False))
                elif "trickle" in reply:
                    self._trickle(reply["trickle"])
                else:
                    self._answer(reply, number)

            def _flood(self, size: int | None, *, declare: bool) -> None:
                self.close_connection = True
                chunk = b"x" * 65536
                sent = 0
                head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + (
                    f"Content-Length: {size}\r\n" if declare else "Transfer-Encoding: chunked\r\n"
                )
                try:
                    self.wfile.write(head.encode() + b"\r\n")
                    while (size is None or sent < size) and not server._stopping.is_set():
                        part = chunk if size is None else chunk[: size - sent]
                        framed = part if declare else b"%x\r\n%s\r\n" % (len(part), part)
                        self.wfile.write(framed)
                        sent += len(part)
                except OSError:  # the client hung up: what it refused is not sent
                    pass
                server.sent.append(sent)
                server.sent_done.set()

            def _trickle(self, seconds: float) -> None:
                self.close_connection = True
                try:
                    self.wfile.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000000\r\n\r\n"
                    )
                    while not server._stopping.wait(seconds):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except OSError:
                    pass

            def _answer(self, reply: dict[str, Any], number: int) -> None:
                status = reply.get("status", 200)
                extra = {}
                if "body" in reply:
                    data = reply["body"].encode()
                elif "gzip" in reply:
                    data = gzip.compress(json.dumps(reply["gzip"]).encode())
                    extra["Content-Encoding"] = "gzip"
                elif "payload" in reply:
                    data = json.dumps(reply["payload"]).encode()
                elif status == 200:
                    data = json.dumps(server._completion(reply, number)).encode()
                else:
                    error = reply.get("error") or {
                        "message": "slow down",
                        "type": "rate_limit_exceeded",
                        "code": status,
                    }
                    data = json.dumps({"error": error}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in {**extra, **reply.get("headers", {})}.items():
                    self.send_header(name, value)
                if "retry_after" in reply:
                    self.send_header("Retry-After", str(reply["retry_after"]))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopping.set()  # hanging handlers return
        self._server.shutdown()
        self._server.server_close()

    @staticmethod
    def _completion(reply: dict[str, Any], number: int) -> dict[str, Any]:
        calls = [
            {
                "id": call.get("id", f"call_{number}_{index}"),
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call["arguments"], str)
                    else json.dumps(call["arguments"]),
                },
            }
            for index, call in enumerate(reply.get("tool_calls", []))
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("text")}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "test-model",
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }


CONTEXT_EXCEEDED = {
    "status": 400,
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    },
}
"""The 400 OpenAI sends for a prompt longer than the model's context window."""
