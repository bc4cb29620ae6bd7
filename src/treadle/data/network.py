"""A sandbox's network choice as data: ``off``, ``on`` or ``allow=HOST[:PORT],…`` (an allow
list), parsed and compared here without the runtime, so that settings, the CLI, a server's
limit and the proxy that enforces the list (``runtime.workspace.network_proxy``) read it one way.

A host is a name (``pypi.org``), a wildcard (``*.example.com``: any name below it, not the name
itself) or an IP address (``10.0.0.5``, ``[2001:db8::1]``). Without a port a rule allows 443 and
80. Loopback and link-local addresses (``127.0.0.1``, ``localhost``, ``[::1]``, ``169.254.x.x``,
the cloud metadata endpoint) are reachable only when named with a port; a name that resolves to
one of them is refused unless that address and port are named too.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Literal

ALLOW_PREFIX = "allow="
DEFAULT_PORTS: tuple[int, ...] = (443, 80)
"""The ports a rule without one allows (HTTPS, HTTP)."""
MAX_RULES = 64
MAX_LIST_CHARS = 4096
LOCAL_NAMES = ("localhost",)
"""Names that mean this machine: like a loopback address, allowed only with a port."""

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
HostKind = Literal["name", "wildcard", "ip"]


class NetworkChoiceError(ValueError):
    """A network choice or an allow list that cannot be used, with what is wrong in it."""


def special_address(address: IPAddress) -> bool:
    """Loopback, link-local (the metadata endpoint), unspecified, multicast or broadcast: an
    address that reaches this machine or its segment rather than a host named on purpose."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address == ipaddress.IPv4Address("255.255.255.255")
    )


def parse_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (IPv6 with or without brackets; an IPv4-mapped IPv6 address as
    its IPv4 one); None when it is not one. Never a zone id (``fe80::1%eth0``)."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "%" in inner:
        return None
    try:
        address = ipaddress.ip_address(inner)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _looks_numeric(name: str) -> bool:
    """A name the C resolver would read as an IPv4 address in a short or odd form (``127.1``,
    ``0x7f.1``, ``2130706433``): never a host name, whatever a rule says."""
    try:
        socket.inet_aton(name)
    except OSError:
        return bool(re.fullmatch(r"[0-9.]+|0x[0-9a-f.]+", name))
    return True


def normalize_host(text: str) -> tuple[str, HostKind]:
    """A host as a rule or a request names it, normalized (lower case, no trailing dot, an IP
    address in its compressed form without brackets) with its kind; ``NetworkChoiceError``
    naming what is wrong otherwise."""
    shown = _shown(text)
    if not text:
        raise NetworkChoiceError("an empty host: give a name, *.name or an IP address")
    address = parse_ip(text)
    if address is not None:
        return str(address), "ip"
    if text.startswith("[") or ":" in text or "%" in text:
        raise NetworkChoiceError(f"host {shown} is not a valid IP address or name")
    name = text.lower().removesuffix(".")
    kind: HostKind = "name"
    if name.startswith("*."):
        name, kind = name[2:], "wildcard"
    labels = name.split(".")
    if (
        not name
        or len(name) > 253
        or not all(_LABEL.fullmatch(label) for label in labels)
        or _looks_numeric(name)
    ):
        raise NetworkChoiceError(
            f"host {shown} is not a valid name, *.name or IP address (letters, digits, "
            "hyphens and dots; a wildcard only as the first label)"
        )
    if kind == "wildcard" and len(labels) < 2:
        raise NetworkChoiceError(
            f"host {shown} is too wide: a wildcard needs a domain with a dot (*.example.com)"
        )
    return (f"*.{name}" if kind == "wildcard" else name), kind


def split_host_port(text: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` split; ``NetworkChoiceError`` for a
    port that is not a number from 1 to 65535. A bare IPv6 address has no port."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise NetworkChoiceError(f"{_shown(text)}: an IPv6 address needs its closing ]")
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise NetworkChoiceError(f"{_shown(text)}: expected :PORT after ]")
        return host, _port(rest[1:], text)
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, _port(port, text)
    return text, None


def _port(text: str, whole: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 5 or not 1 <= int(text) <= 65535:
        raise NetworkChoiceError(f"{_shown(whole)}: the port must be a number from 1 to 65535")
    return int(text)


def _shown(text: str) -> str:
    """``text`` quoted for an error message: escapes made visible, at most 80 characters."""
    cut = text if len(text) <= 80 else text[:77] + "..."
    return ascii(cut)


@dataclass(frozen=True, slots=True)
class HostRule:
    """One entry of an allow list: a host (normalized) and its port (None: 443 and 80)."""

    host: str
    kind: HostKind
    port: int | None

    @property
    def ports(self) -> tuple[int, ...]:
        return DEFAULT_PORTS if self.port is None else (self.port,)

    @property
    def local(self) -> bool:
        """Names this machine (a loopback address or ``localhost``) or a link-local one."""
        if self.kind == "ip":
            address = parse_ip(self.host)
            return address is not None and special_address(address)
        return self.kind == "name" and self.host in LOCAL_NAMES

    @property
    def text(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    def names(self, host: str, kind: HostKind) -> bool:
        """Whether this rule's host covers ``host`` (normalized, of ``kind``)."""
        if self.kind == "wildcard":
            domain = self.host[2:]
            if kind == "name":
                return host.endswith("." + domain)
            below = host[2:]  # another wildcard: the same domain or one below it
            return kind == "wildcard" and (below == domain or below.endswith("." + domain))
        return kind == self.kind and host == self.host

    def allows(self, host: str, kind: HostKind, port: int) -> bool:
        return port in self.ports and self.names(host, kind)

    def within(self, other: HostRule) -> bool:
        """Whether everything this rule allows, ``other`` allows too."""
        return set(self.ports) <= set(other.ports) and other.names(self.host, self.kind)


def parse_rule(text: str) -> HostRule:
    """One ``HOST[:PORT]`` entry; ``NetworkChoiceError`` naming it when it cannot be used."""
    raw_host, port = split_host_port(text.strip())
    host, kind = normalize_host(raw_host)
    rule = HostRule(host, kind, port)
    address = parse_ip(host) if kind == "ip" else None
    if address is not None and (
        address.is_unspecified
        or address.is_multicast
        or address == ipaddress.IPv4Address("255.255.255.255")
    ):
        raise NetworkChoiceError(f"{_shown(text)} is not a host one can connect to")
    if rule.local and port is None:
        raise NetworkChoiceError(
            f"{_shown(text)} is this machine (or its link): name the port to allow, e.g. "
            f"{rule.text}:8080"
        )
    return rule


@dataclass(frozen=True, slots=True)
class AllowList:
    """The hosts a sandbox may reach through its proxy, in the order given."""

    rules: tuple[HostRule, ...]

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """``allow=HOST[:PORT],…`` (or the part after ``allow=``); ``NetworkChoiceError`` for
        an empty list, more than ``MAX_RULES`` entries or an entry that cannot be used."""
        body = text.removeprefix(ALLOW_PREFIX)
        if len(body) > MAX_LIST_CHARS:
            raise NetworkChoiceError(
                f"the allow list has {len(body)} characters: at most {MAX_LIST_CHARS}"
            )
        entries = [entry for entry in body.split(",") if entry.strip()]
        if not entries:
            raise NetworkChoiceError(
                "allow= needs at least one host, e.g. allow=pypi.org,*.pythonhosted.org"
            )
        if len(entries) > MAX_RULES:
            raise NetworkChoiceError(
                f"the allow list has {len(entries)} hosts: at most {MAX_RULES}"
            )
        rules: list[HostRule] = []
        for entry in entries:
            rule = parse_rule(entry)
            if rule not in rules:
                rules.append(rule)
        return cls(tuple(rules))

    @property
    def text(self) -> str:
        """The list as settings store it: ``allow=a.org,*.b.org,127.0.0.1:8080``."""
        return ALLOW_PREFIX + ",".join(rule.text for rule in self.rules)

    def rule_for(self, host: str, kind: HostKind, port: int) -> HostRule | None:
        """The first rule allowing ``host`` (normalized) on ``port``; None: refused."""
        return next((rule for rule in self.rules if rule.allows(host, kind, port)), None)

    def address_allowed(self, address: IPAddress, port: int, rule: HostRule) -> bool:
        """Whether ``address``, which a name allowed by ``rule`` resolved to, may be reached:
        an ordinary address always; a loopback or link-local one only when the rule names this
        machine (``localhost:PORT``) or a rule names that address and port."""
        if not special_address(address):
            return True
        if address.is_loopback and rule.kind == "name" and rule.local:
            return True
        return self.rule_for(str(address), "ip", port) is not None

    def not_within(self, limit: AllowList) -> list[HostRule]:
        """The rules of this list that ``limit`` does not cover."""
        return [
            rule for rule in self.rules if not any(rule.within(theirs) for theirs in limit.rules)
        ]


def normalize_network(value: str) -> str:
    """A network choice as settings keep it: ``off``, ``on`` or a normalized ``allow=…`` list;
    ``NetworkChoiceError`` for anything else."""
    if value in ("off", "on"):
        return value
    if not value.startswith(ALLOW_PREFIX):
        raise NetworkChoiceError(
            f"network {_shown(value)}: give off, on or allow=HOST[:PORT],... (e.g. "
            "allow=pypi.org,*.pythonhosted.org,127.0.0.1:8080)"
        )
    return AllowList.parse(value).text


def allow_list(network: str) -> AllowList | None:
    """The allow list of a (normalized) network choice; None for ``off`` and ``on``."""
    return AllowList.parse(network) if network.startswith(ALLOW_PREFIX) else None


def network_looser(mine: str, limit: str) -> str | None:
    """Why network choice ``mine`` reaches more than ``limit`` allows (None: it does not)."""
    if limit == "on" or mine == "off" or mine == limit:
        return None
    if mine == "on":
        return f"network on (the limit is {limit})"
    theirs = allow_list(limit)
    if theirs is None:  # the limit is off
        return f"network {mine} (the limit is off)"
    outside = (allow_list(mine) or AllowList(())).not_within(theirs)
    if not outside:
        return None
    hosts = ", ".join(rule.text for rule in outside)
    return f"network host(s) {hosts} (not within the limit {limit})"
