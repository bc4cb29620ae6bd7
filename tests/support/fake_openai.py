"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for tests of the real
LiteLLM path: it answers from a queue of scripted replies and records every request."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAIServer:
    """``replies`` items: {"text"|"tool_calls"} for a completion, or {"status": 429} for an error."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
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
                status = reply.get("status", 200)
                payload = (
                    server._completion(reply, len(server.requests))
                    if status == 200
                    else {
                        "error": {
                            "message": "slow down",
                            "type": "rate_limit_exceeded",
                            "code": status,
                        }
                    }
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
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
