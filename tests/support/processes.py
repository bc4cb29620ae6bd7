"""Finding a test's processes on this host by a marker in their command line: a sandboxed
command's own `$$` and `$!` are pids of its namespace, not of the host."""

from __future__ import annotations

from pathlib import Path


def host_pids_with(marker: str) -> list[int]:
    """Pids of the live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def host_pids_in_environment(variable: str, value: str) -> list[int]:
    """Pids of the live processes whose environment holds ``variable=value``: every process a
    test's child started (Ray's raylet and workers too), and no other test's."""
    wanted = f"{variable}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if wanted in environment and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """The process is running (a zombie, killed and not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or during the read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def record_cgroups(monkeypatch) -> list[Path]:
    """The cgroups this process makes from now on, pids and memory (only its own: tests
    running beside it make theirs under the same roots)."""
    from treadle.runtime.workspace import shell

    made: list[Path] = []
    make = shell._make_cgroup

    def recording(root: Path, name: str, settings):
        path = make(root, name, settings)
        if path is not None:
            made.append(path)
        return path

    monkeypatch.setattr(shell, "_make_cgroup", recording)
    return made
