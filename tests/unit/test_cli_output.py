"""What the CLI writes for an operator: tables that show records' text as written, times no date can hold, an export
file whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acker import cli, dlq_cli
from acker.console import table_console


def test_a_table_shows_emoji_codes_in_records_as_written() -> None:
    """A key ``user:100:profile`` showed as ``user💯profile``, and a detail ``KeyError: ':id:'`` as ``KeyError: '🆔'``:
    text not in the record, which could not be searched for."""
    console = table_console()
    with console.capture() as captured:
        console.print("user:100:profile KeyError: ':id:'")
    assert captured.get().strip() == "user:100:profile KeyError: ':id:'"


def test_a_timestamp_no_date_can_hold_is_shown_as_its_milliseconds() -> None:
    """Microseconds written as milliseconds (year 55840): `acker dlq list` showed a traceback instead of its table."""
    assert dlq_cli._when(1_700_000_000_000_000) == "1700000000000000 ms"
    assert dlq_cli._when(1_700_000_000_000) == "2023-11-14 22:13:20"
    assert dlq_cli._when(-1) == "-"


def test_an_export_file_is_put_in_place_only_whole(tmp_path: Path) -> None:
    """An export that failed midway (a read behind an open transaction, a broker gone) left a prefix of the partition
    in place of what the file held, with nothing to say it was cut short."""
    path = tmp_path / "export.jsonl"
    path.write_text("kept\n")
    with pytest.raises(RuntimeError), cli._whole_file(str(path)) as out:
        out.write("half\n")
        raise RuntimeError("the read failed")
    assert path.read_text() == "kept\n" and os.listdir(tmp_path) == ["export.jsonl"]
    with cli._whole_file(str(path)) as out:
        out.write("whole\n")
    assert path.read_text() == "whole\n" and os.listdir(tmp_path) == ["export.jsonl"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as `open` makes a file
