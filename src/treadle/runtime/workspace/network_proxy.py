"""The allow-list proxy of a sandbox whose network is ``allow=HOST[:PORT],…`` (``SandboxNetwork``,
one per sandbox started) and the proxy itself (``ProxyServer``).

The sandbox keeps a network namespace of its own (bubblewrap's ``--unshare-net``: only its own
loopback). Treadle binds a TCP listener on ``127.0.0.1:3128`` *inside* that namespace: a short
thread of this process enters it with ``setns``, binds and listens, and ends (a socket stays in
the namespace it was made in). Everything else runs here, outside, in threads this object owns:
the agent can connect to the listener but cannot kill, replace or reconfigure it, and a program
that ignores the proxy variables finds no route (``Network is unreachable``).

How the sandbox is met: bubblewrap is started behind a ``/bin/sh`` line that opens two FIFOs of a
private folder as ``--info-fd`` (bubblewrap writes the sandbox's pid there once it exists) and
``--block-fd`` (bubblewrap waits for one byte there before it runs the command). The proxy reads
the pid, binds in the namespace, then writes the byte: the first command already finds the
listener. This needs no file descriptor passed by whoever starts the process, so the terminal,
hooks and MCP servers are wrapped the same way. Entering another process's network namespace
needs CAP_SYS_ADMIN: Treadle running as root (as servers and CI do); otherwise the sandbox is
stopped and the reason logged, never started with the network silently off or on.

The proxy speaks HTTP CONNECT (HTTPS and any TCP) and plain HTTP forwarding (absolute-URI
requests, sent on as ``Connection: close``). It resolves names here, checks the resolved
addresses too (``AllowList.address_allowed``: a name cannot lead to loopback), and answers 403
naming the host and the allow list. Bounded: ``ProxyLimits`` caps concurrent connections, the
request head's size and lines, the time to send it, idle time and connect time. The proxy ends
when the sandbox's first process exits (a pidfd it watches) or when ``close`` is called, and
frees every thread, socket and file it made.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import select
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.data.network import (
    AllowList,
    HostKind,
    NetworkChoiceError,
    normalize_host,
    parse_ip,
    split_host_port,
)

logger = logging.getLogger(__name__)

PROXY_HOST = "127.0.0.1"
PROXY_PORT = 3128
"""Where the proxy listens inside the sandbox (its own loopback)."""
PROXY_URL = f"http://{PROXY_HOST}:{PROXY_PORT}"
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)

SETUP_TIMEOUT_S = 30.0
"""How long a sandbox may take to start (bubblewrap to report its pid) before the proxy that
waits for it gives up and frees itself."""
_CLONE_NEWNET = 0x40000000
_WRAPPER = 'exec 3>"$1" 4<"$2"; shift 2; exec "$@"'
"""``sh -c``: open the info FIFO for writing as fd 3 and the block FIFO for reading as fd 4,
then become bubblewrap (given ``--info-fd 3 --block-fd 4``)."""
_CHUNK = 65536
LINGER_S = 1.0
LINGER_BYTES = 1024 * 1024
"""After a refusal, what a client still sending may send before the connection is closed."""


@dataclass(frozen=True)
class ProxyLimits:
    """What one sandbox's proxy allows a client, so a hostile one costs bounded threads,
    memory and time."""

    max_connections: int = 64
    """Open connections at once (each a thread); more are answered 503 at once."""
    max_header_bytes: int = 16 * 1024
    """A request's head (request line and headers); larger: 431."""
    max_header_lines: int = 100
    header_timeout_s: float = 30.0
    """Time to send the whole head; slower: 408."""
    idle_timeout_s: float = 300.0
    """A relayed connection with nothing sent either way this long is closed."""
    connect_timeout_s: float = 10.0


class ProxyRefusal(Exception):
    """A request the proxy answers itself (status, reason) instead of relaying it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Stopped(Exception):
    """The proxy is closing: the connection ends now."""


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def refusal_response(status: int, message: str) -> bytes:
    """The proxy's own answer: the message as the reason phrase too (a CONNECT client such as
    Python's ``http.client`` shows only the status line) and as a plain-text body."""
    phrase = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in message)[:400]
    body = f"{message}\n".encode("ascii", "backslashreplace")
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}: {phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        "X-Treadle-Proxy: refused\r\n\r\n"
    )
    return head.encode("ascii") + body


@dataclass(frozen=True)
class ProxyRequest:
    """A request head the proxy accepted: where to, and what to send there first."""

    method: str
    host: str
    kind: HostKind
    port: int
    head: bytes
    """What the upstream gets before the relay (empty for CONNECT)."""


_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "host", "te"}
)


def parse_request(head: bytes, max_lines: int) -> ProxyRequest:
    """The request a head asks for (everything up to the blank line); ``ProxyRefusal`` 400 for
    anything but ``CONNECT host:port`` or an absolute ``http://`` request with sane headers."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyRefusal(400, "the request head is not ASCII") from None
    lines = text.split("\r\n")
    if len(lines) > max_lines:
        raise ProxyRefusal(431, f"the request has more than {max_lines} header lines")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise ProxyRefusal(400, f"not an HTTP request line: {lines[0][:80]!a}")
    method, target, version = parts
    if not method.isascii() or not method.isalpha() or not method.isupper():
        raise ProxyRefusal(400, f"not an HTTP method: {method[:20]!a}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if (
            not colon
            or not name
            or not all(ch.isalnum() or ch in "-_" for ch in name)
            or any((ord(ch) < 32 and ch != "\t") or ord(ch) == 127 for ch in value)
        ):
            raise ProxyRefusal(400, f"a malformed header line: {line[:80]!a}")
        headers.append((name, value.strip()))
    if method == "CONNECT":
        host_text, port = split_authority(target)
        if port is None:
            raise ProxyRefusal(400, f"CONNECT {target[:80]!a}: name the port (host:443)")
        host, kind = _host(host_text)
        return ProxyRequest(method, host, kind, port, b"")
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        hint = "; HTTPS goes through CONNECT (HTTPS_PROXY)" if scheme.lower() == "https" else ""
        raise ProxyRefusal(
            400, f"{method} {target[:80]!a}: the proxy takes http:// URLs only{hint}"
        )
    cut = min((rest.find(ch) for ch in "/?#" if ch in rest), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if path.startswith("#"):
        path = ""
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    host_text, port = split_authority(authority)
    host, kind = _host(host_text)
    port = port or 80
    shown_host = f"[{host}]" if ":" in host else host
    out = [f"{method} {path} {version}", f"Host: {shown_host}" + ("" if port == 80 else f":{port}")]
    out += [f"{name}: {value}" for name, value in headers if name.lower() not in _HOP_BY_HOP]
    out.append("Connection: close")
    return ProxyRequest(method, host, kind, port, ("\r\n".join(out) + "\r\n\r\n").encode())


def split_authority(authority: str) -> tuple[str, int | None]:
    """``host[:port]`` of a request; ``ProxyRefusal`` 400 for userinfo or a bad port."""
    if "@" in authority or not authority:
        raise ProxyRefusal(400, f"the host {authority[:80]!a} is not host[:port]")
    try:
        return split_host_port(authority)
    except NetworkChoiceError as error:
        raise ProxyRefusal(400, str(error)) from None


def _host(text: str) -> tuple[str, HostKind]:
    try:
        host, kind = normalize_host(text)
    except NetworkChoiceError as error:
        raise ProxyRefusal(400, str(error)) from None
    if kind == "wildcard":
        raise ProxyRefusal(400, f"host {text[:80]!a} is not a host one can connect to")
    return host, kind


Resolver = Callable[[str, int], Sequence[tuple[int, str]]]
"""``(name, port)`` to ``(address family, address)`` pairs; the default asks the system."""


def system_resolver(name: str, port: int) -> list[tuple[int, str]]:
    found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return [(int(family), str(address[0])) for family, _type, _proto, _canon, address in found]


class ProxyServer:
    """Serves one listening socket (``serve``, in the caller's thread) until ``stop`` or until
    ``watch_fd`` (a pidfd) is readable; owns each connection's thread and sockets."""

    def __init__(
        self,
        listener: socket.socket,
        allow: AllowList,
        limits: ProxyLimits = ProxyLimits(),
        resolver: Resolver = system_resolver,
    ) -> None:
        self._listener = listener
        self._allow = allow
        self._limits = limits
        self._resolver = resolver
        self._stop_read, self._stop_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()
        self._stopping = False

    @property
    def connections(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._threads)

    def stop(self) -> None:
        """End ``serve`` and every connection (any thread may call it)."""
        with self._lock:
            self._stopping = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # unblocks a send in progress
        with contextlib.suppress(OSError):
            os.write(self._stop_write, b"!")

    def serve(self, watch_fd: int | None = None) -> None:
        """Accept and serve until stopped; then every connection is ended and freed, the
        listener closed."""
        self._listener.setblocking(False)
        poller = select.poll()
        poller.register(self._listener, select.POLLIN)
        poller.register(self._stop_read, select.POLLIN)
        if watch_fd is not None:
            poller.register(watch_fd, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _event in poller.poll()}
                if self._stop_read in ready or (watch_fd is not None and watch_fd in ready):
                    return
                self._accept_all()
        finally:
            self.stop()
            self._listener.close()
            with self._lock:
                threads = list(self._threads)
            for thread in threads:
                thread.join(timeout=5.0)
            if not any(thread.is_alive() for thread in threads):
                # (Kept open while a thread might still poll it: a closed number is reused.)
                os.close(self._stop_read)
                os.close(self._stop_write)

    def _accept_all(self) -> None:
        while True:
            try:
                client, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # EMFILE and friends: try again on the next wake
                logger.warning("network proxy: accept failed: %s", error)
                time.sleep(0.05)
                return
            with self._lock:
                full = len(self._threads) >= self._limits.max_connections or self._stopping
                if not full:
                    thread = threading.Thread(
                        target=self._serve_one, args=(client,), name="treadle-proxy", daemon=True
                    )
                    self._threads.add(thread)
                    self._sockets.add(client)
            if full:
                _answer_now(
                    client,
                    503,
                    f"the proxy serves at most {self._limits.max_connections} connections at "
                    "once: close some and try again",
                )
                continue
            thread.start()

    def _serve_one(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            head, rest = self._read_head(client)
            request = parse_request(head, self._limits.max_header_lines)
            upstream = self._open_upstream(request)
            if request.method == "CONNECT":
                self._send(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                self._send(upstream, request.head)
            if rest:
                self._send(upstream, rest)
            self._relay(client, upstream)
        except ProxyRefusal as refusal:
            with contextlib.suppress(OSError, _Stopped):
                self._send(client, refusal_response(refusal.status, refusal.message))
                self._linger(client)
        except (_Stopped, OSError):
            pass
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())
                for sock in (client, upstream):
                    if sock is not None:
                        self._sockets.discard(sock)
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()

    def _read_head(self, client: socket.socket) -> tuple[bytes, bytes]:
        """The request head (without its blank line) and the bytes read after it."""
        limit = self._limits.max_header_bytes
        deadline = time.monotonic() + self._limits.header_timeout_s
        buffer = bytearray()
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                if end > limit:
                    break
                return bytes(buffer[:end]), bytes(buffer[end + 4 :])
            if len(buffer) > limit:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProxyRefusal(
                    408, f"the request head took more than {self._limits.header_timeout_s:g} s"
                )
            if not self._wait(client, remaining):
                continue
            data = client.recv(_CHUNK)
            if not data:
                raise _Stopped  # the client went away before asking anything
            buffer += data
        raise ProxyRefusal(431, f"the request head is larger than {limit} bytes")

    def _linger(self, client: socket.socket) -> None:
        """After a refusal: read and drop what the client is still sending (a bounded while),
        so that closing does not reset the connection before it has read the answer."""
        client.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + LINGER_S
        dropped = 0
        while dropped < LINGER_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._wait(client, remaining):
                return
            data = client.recv(_CHUNK)
            if not data:
                return
            dropped += len(data)

    def _open_upstream(self, request: ProxyRequest) -> socket.socket:
        allowed = self._allow.text
        shown = f"[{request.host}]" if ":" in request.host else request.host
        where = f"{shown}:{request.port}"
        rule = self._allow.rule_for(request.host, request.kind, request.port)
        candidates: list[tuple[int, str]] = []
        if rule is None:
            raise ProxyRefusal(403, f"treadle: {where} is not allowed (network {allowed})")
        if request.kind == "ip":
            address = parse_ip(request.host)
            assert address is not None  # normalized as an IP address
            family = int(socket.AF_INET6 if address.version == 6 else socket.AF_INET)
            candidates.append((family, str(address)))
        else:
            try:
                resolved = self._resolver(request.host, request.port)
            except OSError as error:
                raise ProxyRefusal(502, f"treadle: cannot resolve {shown}: {error}") from None
            refused = []
            for family, text in resolved:
                address = parse_ip(text)
                if address is not None and self._allow.address_allowed(address, request.port, rule):
                    candidates.append((family, text))
                else:
                    refused.append(text)
            if not candidates:
                raise ProxyRefusal(
                    403,
                    f"treadle: {where} resolves to {', '.join(dict.fromkeys(refused))}, a "
                    "loopback or link-local address: allowed only when that address is named "
                    f"with its port (network {allowed})",
                )
        problem = "no address"
        for family, text in candidates:
            upstream = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            with self._lock:
                if self._stopping:
                    upstream.close()
                    raise _Stopped
                self._sockets.add(upstream)
            try:
                upstream.settimeout(self._limits.connect_timeout_s)
                upstream.connect((text, request.port))
                return upstream
            except OSError as error:
                if isinstance(error, TimeoutError):
                    problem = f"no answer within {self._limits.connect_timeout_s:g} s"
                else:
                    problem = error.strerror or str(error)
                with self._lock:
                    self._sockets.discard(upstream)
                upstream.close()
        raise ProxyRefusal(502, f"treadle: cannot connect to {where}: {problem}")

    def _wait(self, sock: socket.socket, timeout: float) -> bool:
        """Whether ``sock`` is readable within ``timeout``; ``_Stopped`` when closing."""
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        poller.register(self._stop_read, select.POLLIN)
        ready = {fd for fd, _event in poller.poll(max(1, int(timeout * 1000)))}
        if self._stop_read in ready:
            raise _Stopped
        return sock.fileno() in ready

    def _send(self, sock: socket.socket, data: bytes) -> None:
        if self._stopping:
            raise _Stopped
        sock.settimeout(self._limits.idle_timeout_s)
        sock.sendall(data)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        """Bytes both ways until both sides are done, one is idle too long, or closing."""
        peers = {client.fileno(): (client, upstream), upstream.fileno(): (upstream, client)}
        poller = select.poll()
        for fd in peers:
            poller.register(fd, select.POLLIN)
        poller.register(self._stop_read, select.POLLIN)
        reading = set(peers)
        timeout_ms = max(1, int(self._limits.idle_timeout_s * 1000))
        while reading:
            events = poller.poll(timeout_ms)
            if not events:
                return  # idle
            for fd, _event in events:
                if fd == self._stop_read:
                    raise _Stopped
                source, target = peers[fd]
                data = source.recv(_CHUNK)
                if not data:
                    reading.discard(fd)
                    poller.unregister(fd)
                    with contextlib.suppress(OSError):
                        target.shutdown(socket.SHUT_WR)
                    continue
                self._send(target, data)


def _answer_now(client: socket.socket, status: int, message: str) -> None:
    """Answer without a thread (never blocks), then close."""
    with contextlib.suppress(OSError):
        client.setblocking(False)
        client.send(refusal_response(status, message))
    client.close()


def proxy_problem() -> str | None:
    """Why an allow-list sandbox cannot start in this process (None: it can): entering the
    sandbox's network namespace needs root."""
    if os.geteuid() != 0:
        return (
            "network allow=... needs Treadle to run as root (it binds its proxy inside the "
            "sandbox's network namespace with setns); run as root, or use --network off or on"
        )
    return None


class SandboxSetupError(Exception):
    """Why the proxy could not be put inside a sandbox's network namespace."""


class SandboxNetwork:
    """The allow-list network of one sandbox about to start: ``wrap`` its bubblewrap command
    line, add ``environment`` to its environment, start it. From then on this object waits for
    the sandbox, binds its proxy inside it and serves it until the sandbox's first process exits
    (or ``close``); ``failure`` says why, when it could not."""

    def __init__(
        self,
        allow: AllowList,
        limits: ProxyLimits = ProxyLimits(),
        *,
        setup_timeout_s: float = SETUP_TIMEOUT_S,
    ) -> None:
        self.allow = allow
        self.limits = limits
        self.failure: str | None = None
        self._setup_timeout_s = setup_timeout_s
        self._folder = Path(tempfile.mkdtemp(prefix="treadle-network-"))
        self._info_path = self._folder / "info"
        self._block_path = self._folder / "block"
        self._info_fd = self._block_fd = -1
        self._server: ProxyServer | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        try:
            os.mkfifo(self._info_path, 0o600)
            os.mkfifo(self._block_path, 0o600)
            # Held open before the sandbox starts, so that its shell never blocks on them: the
            # info FIFO's read end (EOF once bubblewrap wrote and closed it), the block FIFO
            # read-write (the byte written once the proxy listens).
            self._info_fd = os.open(self._info_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._block_fd = os.open(self._block_path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            self._free_setup()
            raise
        self._thread = threading.Thread(target=self._run, name="treadle-network", daemon=True)
        self._thread.start()

    @property
    def environment(self) -> dict[str, str]:
        """The proxy variables (upper and lower case: curl, pip, Python, git, npm read one)."""
        return dict.fromkeys(PROXY_VARIABLES, PROXY_URL)

    @property
    def finished(self) -> bool:
        """The proxy has ended and freed what it held."""
        return not self._thread.is_alive()

    @property
    def serving(self) -> bool:
        return self._server is not None and not self._closed.is_set()

    def wrap(self, bwrap_argv: Sequence[str]) -> tuple[str, ...]:
        """``bwrap_argv`` started so that this object meets the sandbox (see the module)."""
        bwrap, *rest = bwrap_argv
        opened = ("/bin/sh", "-c", _WRAPPER, "treadle-network")
        fifos = (str(self._info_path), str(self._block_path))
        return (*opened, *fifos, bwrap, "--info-fd", "3", "--block-fd", "4", *rest)

    def close(self) -> None:
        """Stop serving and free everything (waits for the proxy's threads)."""
        self._closed.set()
        with self._lock:
            server = self._server
        if server is not None:
            server.stop()
        self._wake_setup()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)

    def wait_closed(self, timeout: float) -> bool:
        """Whether the proxy has ended (its sandbox exited, or ``close``) within ``timeout``."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _wake_setup(self) -> None:
        # The setup waits on the info FIFO: a writer's end opened and closed wakes it.
        with contextlib.suppress(OSError):
            os.close(os.open(self._info_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))

    def _run(self) -> None:
        pid: int | None = None
        pidfd = -1
        try:
            try:
                pid = self._child_pid()
                pidfd = os.pidfd_open(pid)
                listener = _listen_in_namespace_of(pid, self._setup_timeout_s)
            except (SandboxSetupError, OSError) as error:
                if not self._closed.is_set():
                    self.failure = str(error)
                    logger.warning("the sandbox's network proxy could not start: %s", error)
                if pid is not None:
                    # Never a sandbox that asked for allow= running without its proxy.
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                return
            server = ProxyServer(listener, self.allow, self.limits)
            with self._lock:
                self._server = server
            if self._closed.is_set():
                server.stop()
            with contextlib.suppress(OSError):
                os.write(self._block_fd, b"x")  # the sandbox may run its command now
            self._free_setup()
            server.serve(watch_fd=pidfd)
        finally:
            self._free_setup()
            if pidfd >= 0:
                os.close(pidfd)
            self._closed.set()

    def _child_pid(self) -> int:
        """The sandbox's first process (in this process's pid namespace), as bubblewrap
        writes it to its info fd."""
        deadline = time.monotonic() + self._setup_timeout_s
        data = bytearray()
        poller = select.poll()
        poller.register(self._info_fd, select.POLLIN)
        while len(data) < 65536:
            if self._closed.is_set():
                raise SandboxSetupError("closed before the sandbox started")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxSetupError(
                    f"the sandbox did not start within {self._setup_timeout_s:g} s"
                )
            if not poller.poll(max(1, int(remaining * 1000))):
                continue
            try:
                chunk = os.read(self._info_fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                break
            data += chunk
        try:
            info: Any = json.loads(bytes(data).decode("utf-8"))
            pid = int(info["child-pid"])
        except (ValueError, KeyError, TypeError):
            raise SandboxSetupError(
                "bubblewrap did not report the sandbox's pid (it failed to start, or an old "
                "bubblewrap without --info-fd)"
            ) from None
        return pid

    def _free_setup(self) -> None:
        with self._lock:
            for name in ("_info_fd", "_block_fd"):
                fd = getattr(self, name)
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                    setattr(self, name, -1)
            shutil.rmtree(self._folder, ignore_errors=True)


_libc: ctypes.CDLL | None = None


def _setns(fd: int, kind: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, kind) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _listen_in_namespace_of(pid: int, timeout_s: float) -> socket.socket:
    """A listener on ``PROXY_HOST:PROXY_PORT`` in process ``pid``'s network namespace, made by
    a thread that enters it and ends (this process's own threads stay where they are)."""
    try:
        namespace = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise SandboxSetupError(f"cannot open the sandbox's network namespace: {error}") from None
    made: dict[str, Any] = {}
    try:
        if os.fstat(namespace).st_ino == os.stat("/proc/self/ns/net").st_ino:
            raise SandboxSetupError("the sandbox shares this process's network (no --unshare-net)")
        thread = threading.Thread(
            target=_bind_inside, args=(namespace, timeout_s, made), name="treadle-netns"
        )
        thread.start()
        thread.join()
    finally:
        os.close(namespace)
    if "error" in made:
        raise SandboxSetupError(made["error"])
    listener: socket.socket = made["listener"]
    return listener


def _bind_inside(namespace: int, timeout_s: float, made: dict[str, Any]) -> None:
    """Runs in a thread of its own that ends here: enter ``namespace``, bind, listen."""
    try:
        _setns(namespace, _CLONE_NEWNET)
    except OSError as error:
        why = (
            "Treadle must run as root (CAP_SYS_ADMIN) for network allow=... (use --network "
            "off or on otherwise)"
            if error.errno == errno.EPERM
            else str(error)
        )
        made["error"] = f"cannot enter the sandbox's network namespace: {why}"
        return
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            listener.bind((PROXY_HOST, PROXY_PORT))
            listener.listen(128)
        except OSError as error:
            # bubblewrap brings the loopback up just after it reports its pid.
            if error.errno == errno.EADDRNOTAVAIL and time.monotonic() < deadline:
                time.sleep(0.002)
                continue
            listener.close()
            made["error"] = f"cannot listen on {PROXY_HOST}:{PROXY_PORT} in the sandbox: {error}"
            return
        made["listener"] = listener
        return
