"""Command help from docstrings: the reStructuredText quoting that reads well in code reads badly in a terminal."""

from __future__ import annotations

import re

_QUOTED = re.compile(r"``([^`]+)``|`([^`]+)`")


def prose(doc: str | None) -> str:
    """``doc`` without its literal and reference quotes: ``dlq_topic`` and `acker.retries` become plain words."""
    return _QUOTED.sub(lambda m: m.group(1) or m.group(2), doc or "")
