"""Skill files are read below the workspace's descriptor: a skill folder swapped for a link to a
host folder (``renameat2(RENAME_EXCHANGE)``, as a background job in the sandbox can do between
runs) never brings a host file into the model's context."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from treadle.runtime.skills.loading import load_skills

SECRET = "HOST SECRET"
SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop = (os.fsencode(p) for p in sys.argv[1:4])
if libc.renameat2(-100, a, -100, b, 2) != 0:  # RENAME_EXCHANGE
    sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
count = 1
print("ready", flush=True)  # swapping from now on
while not os.path.exists(stop):
    if libc.renameat2(-100, a, -100, b, 2) != 0:  # RENAME_EXCHANGE
        sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
    count += 1
print(count, flush=True)
"""


def test_a_swapped_skill_folder_never_loads_a_host_file(tmp_path: Path) -> None:
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "SKILL.md").write_text(f"{SECRET}\n")
    workspace = tmp_path / "ws"
    skills = workspace / ".treadle" / "skills"
    (skills / "deploy").mkdir(parents=True)
    (skills / "deploy" / "SKILL.md").write_text("How to deploy.\n")
    (skills / "zz-link").symlink_to(outside)
    stop = tmp_path / "stop"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(skills / "deploy"), str(skills / "zz-link"), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    bodies: list[str] = []
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline() == b"ready\n", "the swapper did not start"
        for _ in range(1500):
            bodies.extend(skill.content for skill in load_skills(workspace).skills)
    finally:
        stop.touch()
        out, err = swapper.communicate(timeout=60)
    assert swapper.returncode == 0, err.decode()
    assert int(out) > 0
    assert [body for body in bodies if SECRET in body] == []
    assert any("How to deploy." in body for body in bodies), "no load read the real skill"
