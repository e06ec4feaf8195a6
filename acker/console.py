"""The console the CLI prints its tables to, and how a table writes what it shows."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from rich.console import Console


def table_console() -> Console:
    """A terminal's console; piped (to a file, ``less``, ``grep``), one of 200 columns unless ``COLUMNS`` says
    otherwise, so that rows stay whole rather than cut to rich's default of 80. Without markup: its tables show
    what records and other processes wrote (a dead letter's key, an instance id), and ``[/x]`` in one was an error
    (a traceback instead of the table), ``[bold]`` a style; nor emoji codes: a key ``user:100:profile`` showed as
    ``user💯profile``."""
    console = Console(markup=False, emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(markup=False, emoji=False, width=200)
    return console


def printable(text: str) -> str:
    """``text`` with what a terminal would act on rather than show (escape sequences, other control characters,
    line breaks) written as Python escapes: a record's key or value printed as it is could clear the operator's
    screen or retitle the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def utc_time(ms: int, *, millis: bool = False) -> str:
    """A record's timestamp (milliseconds since the epoch) as a UTC time, to the second (or the millisecond); ``-``
    for none, and one no date can hold (past year 9999: microseconds written as milliseconds, say) as its
    milliseconds, not a traceback in place of the whole listing."""
    if ms <= 0:
        return "-"
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if millis else when.strftime("%Y-%m-%d %H:%M:%S")
