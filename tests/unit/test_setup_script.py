"""scripts/setup.sh makes .venv again when the one there cannot serve this checkout: run on a copy whose Python is a
stub that records each venv it makes (and whose pip installs nothing)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A Python for setup.sh: every check passes, `-m venv .venv` makes a .venv whose python is this stub, and says so.
PYTHON = """#!/usr/bin/env bash
if [ "$1 $2 $3" = "-m venv .venv" ]; then mkdir -p .venv/bin && cp "$0" .venv/bin/python && echo made >>"$MADE"; fi
exit 0
"""


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", checkout / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    python = tmp_path / "python3"
    python.write_text(PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return checkout


def _setup(tmp_path: Path, checkout: Path) -> int:
    """Runs setup.sh in ``checkout``; returns how many venvs it made."""
    made = tmp_path / "made"
    made.write_text("")
    subprocess.run(
        ["bash", str(checkout / "scripts" / "setup.sh")], capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "PYTHON": str(tmp_path / "python3"), "MADE": str(made)}, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return len(made.read_text().split())


def test_a_venv_made_for_this_checkout_is_kept(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    assert _setup(tmp_path, checkout) == 1
    assert _setup(tmp_path, checkout) == 0


@pytest.mark.parametrize("how", ["copied", "python gone"])
def test_a_venv_made_for_another_checkout_or_by_a_python_gone_is_made_again(tmp_path: Path, how: str) -> None:
    """A checkout copied with its .venv ran the other checkout's code (its scripts name the other .venv's python);
    one whose Python was upgraded away failed at the first command. Both passed setup without a word."""
    first = _checkout(tmp_path)
    assert _setup(tmp_path, first) == 1
    if how == "copied":
        checkout = tmp_path / "copy"
        shutil.copytree(first, checkout, symlinks=True)
    else:
        checkout = first
        (checkout / ".venv" / "bin" / "python").unlink()
    assert _setup(tmp_path, checkout) == 1
    assert (checkout / ".venv" / ".checkout").read_text().strip() == str(checkout)


def test_a_checkout_reached_through_a_symlink_keeps_its_venv(tmp_path: Path) -> None:
    """Compared by the path it was reached by, a checkout reached by turns through a symlink and its real path (or
    macOS's /var and /private/var) had its .venv made again at every turn."""
    checkout = _checkout(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(checkout)
    assert [_setup(tmp_path, where) for where in (checkout, link, checkout, link)] == [1, 0, 0, 0]
