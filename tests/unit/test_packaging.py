"""pyproject lists its packages explicitly (schemas/ ships as acker.schemas): every package directory is listed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    code = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("acker", "spark_jobs")
        for p in (ROOT / top).rglob("*.py")
    }
    data = {"acker.kafka.resources", "acker.schemas"}  # the broker's pom and log config; schemas/ as acker.schemas
    assert code | data == listed
