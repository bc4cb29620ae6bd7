"""A model provider for load benchmarks: an OpenAI-compatible chat-completions server on
127.0.0.1 that answers every request after a fixed delay, as a hosted model would, and keeps
no state: the number of tool results already in the request says which step it is (a terminal
call while fewer than ``calls`` were answered, then ``finish``). Many conversations can use it
at once.

Run it as its own process (``python -m treadle.bench.fake_provider --delay 0.5 --calls 5``, it
prints its port) so that its CPU is not counted as the server's or the client's."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(calls_done: int, calls: int) -> dict[str, Any]:
    """The reply to a request that already holds ``calls_done`` tool results."""
    if calls_done < calls:
        name, arguments = "terminal", {"command": f"echo step {calls_done}"}
    else:
        name, arguments = "finish", {"message": "done"}
    call = {
        "id": f"call_{secrets.token_hex(8)}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {
        "id": f"chatcmpl-{secrets.token_hex(8)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
    }


def make_server(delay_s: float, calls: int, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a provider's API does

        def log_message(self, *_args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            done = sum(1 for message in body.get("messages", []) if message.get("role") == "tool")
            time.sleep(delay_s)
            data = json.dumps(completion(done, calls)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.request_queue_size = 1024  # hundreds of conversations connect at once
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds before each answer")
    parser.add_argument("--calls", type=int, default=5, help="terminal calls before finish")
    parser.add_argument("--tag", default="", help="a mark in its command line (whose it is)")
    options = parser.parse_args(argv)
    server = make_server(options.delay, options.calls)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
