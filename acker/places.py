"""Where a record lies in Kafka: a topic's name, and ``TOPIC/PARTITION/OFFSET``, the place a spout names its
records by (their message ids), dead letters their origins by, and the commands take.

A place read back is anybody's text (a header, an argument), so it is parsed strictly: a topic Kafka could name,
and ASCII decimal numbers a partition (below 2**31) and an offset (below 2**63) can be. ``int()`` would take signs,
spaces, underscores and other scripts' digits.
"""

from __future__ import annotations

import re
from typing import NamedTuple

TOPIC_NAME_MAX = 249  # Kafka's limit
_TOPIC_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{TOPIC_NAME_MAX}}}")
PARTITIONS = 2**31  # Kafka's partitions are signed 32-bit numbers
OFFSETS = 2**63  # and its offsets signed 64-bit ones


def topic_name_problem(name: str) -> str | None:
    """Why Kafka refuses ``name`` as a topic's name, or None: the broker answers such a name with an invalid-topic
    error only when it is used, and a service started with one waited for a topic that can never exist."""
    if name in (".", "..") or not _TOPIC_NAME.fullmatch(name):
        return f"{name[:80]!r} cannot name a Kafka topic ([A-Za-z0-9._-], 1 to 249 characters, not . or ..)"
    return None


class Place(NamedTuple):
    """A record's place: its topic, partition and offset."""

    topic: str
    partition: int
    offset: int


def place_of(text: str) -> Place | None:
    """``TOPIC/PARTITION/OFFSET`` → its parts; None when it names no place a record can have."""
    topic, slash, rest = text.partition("/")  # a topic's name has no "/"
    found = _numbers(rest) if slash and topic_name_problem(topic) is None else None
    return None if found is None else Place(topic, *found)


def partition_and_offset(text: str) -> tuple[int, int] | None:
    """``PARTITION/OFFSET``, or ``OFFSET`` of partition 0 → (partition, offset); None as `place_of`."""
    return _numbers(text if "/" in text else f"0/{text}")


def _numbers(text: str) -> tuple[int, int] | None:
    """``PARTITION/OFFSET`` → (partition, offset); None unless each is an ASCII decimal number Kafka's can be."""
    parts = text.split("/")
    if len(parts) != 2:
        return None
    partition, offset = _below(parts[0], PARTITIONS), _below(parts[1], OFFSETS)
    return None if partition is None or offset is None else (partition, offset)


def _below(text: str, bound: int) -> int | None:
    """The number ``text`` spells in ASCII decimal digits when it is below ``bound``, else None (any text: ``int()``
    of thousands of digits would raise)."""
    if not text or len(text) > len(str(bound)) or not text.isascii() or not text.isdigit():
        return None
    number = int(text)
    return number if number < bound else None
