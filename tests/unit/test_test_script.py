"""scripts/test.sh (what CI runs) fails when any of its checks fails: run on a copy whose setup, tools and pytest are
stubs that fail on request."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("java", "mvn", "docker-compose")


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _run(tmp_path: Path, failing: str, *args: str) -> subprocess.CompletedProcess[str]:
    """scripts/test.sh in a copy where ``failing`` (``ruff check``, ``ruff format``, ``mypy``, ``pytest``,
    or ``pytest-empty``: no tests collected) fails and everything else passes."""
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    _stub(tmp_path / "scripts" / "setup.sh", "exit 0")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    _stub(bin_dir / "ruff", f'[ "ruff $1" = "{failing}" ] && exit 1; exit 0')
    _stub(bin_dir / "mypy", f'[ "mypy" = "{failing}" ] && exit 1; exit 0')
    _stub(
        bin_dir / "python",
        f'if [ "$2" = pytest ]; then [ "pytest" = "{failing}" ] && exit 1; [ "pytest-empty" = "{failing}" ] && exit 5;'
        " exit 0; fi; exit 0",
    )
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in TOOLS:
        _stub(tools / tool, "exit 0")
    path = f"{tools}:{os.environ['PATH']}"
    return subprocess.run(
        ["bash", str(tmp_path / "scripts" / "test.sh"), *args], capture_output=True, text=True, env={**os.environ,
        "PATH": path}, stdin=subprocess.DEVNULL, check=False, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("failing", ["ruff check", "ruff format", "mypy", "pytest", "pytest-empty"])
def test_the_test_command_fails_when_any_check_fails(tmp_path: Path, failing: str) -> None:
    """A failing `ruff check`, first of an `a && b && c` list, did not stop the script under `set -e`: CI passed."""
    assert _run(tmp_path, failing).returncode != 0


def test_the_test_command_passes_when_every_check_passes(tmp_path: Path) -> None:
    assert _run(tmp_path, "nothing").returncode == 0
