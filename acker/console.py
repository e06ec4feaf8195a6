"""The console the CLI prints its tables to."""

from __future__ import annotations

import os

from rich.console import Console


def table_console() -> Console:
    """A terminal's console; piped (to a file, ``less``, ``grep``), one of 200 columns unless ``COLUMNS`` says
    otherwise, so that rows stay whole rather than cut to rich's default of 80."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=200)
    return console
