"""Who a sandbox runs as on the host (``SandboxUser``), decided by one rule (``sandbox_user``).

A sandbox started by root as root keeps uid 0 inside, without capabilities: the kernel-side
layers (seccomp, read-only kernel settings, no nested user namespace) are what keep it from the
host, and the files it makes are root's. So, when this process is root, the sandbox runs as:

- the user the operator named (``treadle serve --sandbox-user NAME|UID``, default ``nobody``);
- else the workspace's owner, when that is not root (``treadle run`` by root in a user's folder:
  the files stay the user's);
- else (root's own folder) uid 0 without capabilities, and the isolation fact says so.

A process that is not root cannot switch: its sandboxes run as itself.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SERVER_USER = "nobody"
"""Who a server run by root starts its sandboxes as, unless ``--sandbox-user`` says."""
NOBODY_UID = 65534
"""nobody's usual uid and gid, for a machine whose user database has no ``nobody``."""


@dataclass(frozen=True)
class SandboxUser:
    """A host uid and gid a sandbox runs as (its only group)."""

    uid: int
    gid: int

    def fact(self) -> dict[str, Any]:
        """As the isolation fact records it: every sandbox has no capability at all."""
        return {"uid": self.uid, "gid": self.gid, "capabilities": "none"}


def parse_sandbox_user(text: str) -> SandboxUser:
    """A user name or numeric uid from this machine's user database (a uid it does not know
    gets the same number as its gid). ``ValueError`` naming the problem."""
    text = text.strip()
    if text.isdigit():
        uid = int(text)
        if uid > 0xFFFFFFFE:
            raise ValueError(f"uid {text} is out of range (0 to 4294967294)")
        try:
            return SandboxUser(uid, pwd.getpwuid(uid).pw_gid)
        except KeyError:
            return SandboxUser(uid, uid)
    try:
        entry = pwd.getpwnam(text)
    except KeyError:
        raise ValueError(
            f"no user {text!r} on this machine: give a name from /etc/passwd or a numeric uid"
        ) from None
    return SandboxUser(entry.pw_uid, entry.pw_gid)


def sandbox_user(folder: Path, wanted: SandboxUser | None = None) -> SandboxUser | None:
    """Who the sandbox of a workspace in ``folder`` runs as, when that is another user than
    this process's (None: as this process, root or not). See the module's rule."""
    if os.geteuid() != 0:
        return None
    if wanted is not None:
        return None if wanted.uid == 0 else wanted
    try:
        owner = folder.stat()
    except OSError:
        return None
    if owner.st_uid == 0:
        return None
    try:
        return SandboxUser(owner.st_uid, pwd.getpwuid(owner.st_uid).pw_gid)
    except KeyError:
        return SandboxUser(owner.st_uid, owner.st_gid)


def unreachable_folder(path: Path, user: SandboxUser) -> Path | None:
    """The first folder on the way to ``path`` (itself included) that ``user`` may not pass
    through (no search permission for it), or None: bubblewrap, started as that user, must
    reach every path it shows."""
    for folder in [*reversed(path.parents), path]:
        try:
            mode = folder.stat()
        except OSError:
            return folder
        if mode.st_uid == user.uid:
            allowed = mode.st_mode & stat.S_IXUSR
        elif mode.st_gid == user.gid:
            allowed = mode.st_mode & stat.S_IXGRP
        else:
            allowed = mode.st_mode & stat.S_IXOTH
        if not allowed:
            return folder
    return None


def effective_user(user: SandboxUser | None) -> SandboxUser:
    """The user a sandbox really runs as: ``user``, or this process's."""
    return user if user is not None else SandboxUser(os.geteuid(), os.getegid())
