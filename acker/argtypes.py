"""Types of command-line numbers: a value out of range is argparse's one-line usage error (exit status 2), not a
silent surprise later (a negative count read as "none", a rate above 1) nor a stack trace from deep inside."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from acker.places import topic_name_problem


def at_least(low: int, below: int | None = None) -> Callable[[str], int]:
    """A whole number ``>= low`` (and ``< below``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if below is not None and value >= below:
            raise argparse.ArgumentTypeError(f"must be below {below}, got {value}")
        return value

    return parse


def positive(text: str) -> float:
    """A number above 0 (seconds, a rate)."""
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def up_to(high: float) -> Callable[[str], float]:
    """A number above 0 and at most ``high`` (seconds)."""

    def parse(text: str) -> float:
        value = positive(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be {high:g} at most, got {text}")
        return value

    return parse


def non_negative(text: str) -> float:
    """A number, 0 or more (seconds)."""
    value = _number(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number, 0 or more, got {text}")
    return value


def share(text: str) -> float:
    """A probability, or a share of something: a number from 0 to 1."""
    value = _number(text)
    if math.isnan(value) or not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def group_name(text: str) -> str:
    """A consumer group's name: not empty nor blank (librdkafka would take it, and no group has that name)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a consumer group's name, not empty")
    return text


def topic_with_partitions(text: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:PARTITIONS`` (1 to 100,000): a topic to create; None partitions: the configured count."""
    name, _, count = text.partition(":")
    if (problem := topic_name_problem(name)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return name, at_least(1, 100_001)(count) if count else None
