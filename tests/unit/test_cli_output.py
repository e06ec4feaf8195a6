"""What the CLI writes for an operator: tables that show records' text as written, times no date can hold, an export
file whole or not at all."""

from __future__ import annotations

import argparse
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import pytest

import acker.export
from acker import cli
from acker.config import ServiceConfig
from acker.console import table_console, utc_time


def test_a_table_shows_emoji_codes_in_records_as_written() -> None:
    """A key ``user:100:profile`` showed as ``user💯profile``, and a detail ``KeyError: ':id:'`` as ``KeyError: '🆔'``:
    text not in the record, which could not be searched for."""
    console = table_console()
    with console.capture() as captured:
        console.print("user:100:profile KeyError: ':id:'")
    assert captured.get().strip() == "user:100:profile KeyError: ':id:'"


def test_a_timestamp_no_date_can_hold_is_shown_as_its_milliseconds() -> None:
    """Microseconds written as milliseconds (year 55840): `acker dlq list` showed a traceback instead of its table."""
    assert utc_time(1_700_000_000_000_000) == "1700000000000000 ms"
    assert utc_time(1_700_000_000_000) == "2023-11-14 22:13:20"
    assert utc_time(-1) == "-"
    assert utc_time(1_700_000_000_123, millis=True) == "2023-11-14 22:13:20.123"


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


def test_an_export_over_a_file_keeps_its_permissions_and_a_missing_directory_is_said_of_the_file(
    tmp_path: Path,
) -> None:
    """An export over a file made private (0600) left it readable by all (0644): the file put in its place had the
    mode a new file gets, where `open` keeps the old one's. And ``-o /no/such/dir/f`` said "No such file or
    directory: /no/such/dir/.f.xa9c.partial", a file nobody had named."""
    private, new = tmp_path / "private.jsonl", tmp_path / "new.jsonl"
    private.write_text("kept\n")
    private.chmod(0o600)
    for path in (private, new):
        with cli._whole_file(str(path)) as out:
            out.write("whole\n")
    umask = os.umask(0)
    os.umask(umask)
    assert (stat.S_IMODE(private.stat().st_mode), stat.S_IMODE(new.stat().st_mode)) == (0o600, 0o666 & ~umask)
    missing = tmp_path / "no" / "such.jsonl"
    with pytest.raises(FileNotFoundError) as raised, cli._whole_file(str(missing)):
        pass
    assert raised.value.filename == str(missing)


def test_an_export_to_a_link_or_a_pipe_writes_through_it(tmp_path: Path) -> None:
    """Put in place whole, a file replaced the link (its target left as it was) or the named pipe (its reader got
    nothing). Written through a link as it was, an export that failed midway cut its target's old export short."""
    target, link = tmp_path / "target", tmp_path / "link"
    target.write_text("old\n")
    link.symlink_to(target)
    with pytest.raises(RuntimeError), cli._output(str(link)) as out:
        out.write("half\n")
        raise RuntimeError("the read failed")
    assert link.is_symlink() and target.read_text() == "old\n"
    with cli._output(str(link)) as out:
        out.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["link", "target"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "made")
    with cli._output(str(dangling)) as out:
        out.write("made\n")
    assert dangling.is_symlink() and (tmp_path / "made").read_text() == "made\n"
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with cli._output(str(pipe)) as out:
            out.write("through\n")
        assert os.read(reader, 100) == b"through\n" and stat.S_ISFIFO(pipe.stat().st_mode)
    finally:
        os.close(reader)


def test_an_export_to_standard_output_by_name_writes_where_the_shell_stands(tmp_path: Path) -> None:
    """``-o /dev/stdout`` with standard output a file: the file was replaced (``>> log`` lost what it held; a group's
    lines after the export went to the file replaced), or reopened, cut short, and written over by the shell."""
    script = "import sys\nfrom acker import cli\nwith cli._output(sys.argv[1]) as out:\n    out.write('export\\n')\n"
    (tmp_path / "to-stdout").symlink_to("/dev/stdout")
    for name, fd in (("/dev/stdout", 1), ("/dev/fd/1", 1), ("/proc/self/fd/1", 1), (str(tmp_path / "to-stdout"), 1),
                     ("/dev/fd/3", 3)):  # fmt: skip
        log = tmp_path / "log"
        log.write_text("kept\n")
        command = f'{{ echo header >&{fd}; {sys.executable} -c "$0" {name}; echo footer >&{fd}; }} {fd}>> {log}'
        subprocess.run(["sh", "-c", command, script], check=True, timeout=60)
        assert log.read_text() == "kept\nheader\nexport\nfooter\n", name
    with pytest.raises(OSError) as raised:  # not open here: nothing written there
        cli._output("/dev/fd/987")
    assert raised.value.filename == "/dev/fd/987"
    both = tmp_path / "both"  # its own name, though standard output and error are that file: whole, no stderr in it
    command = f'{sys.executable} -c "$0" {both}; echo noise >&2'
    subprocess.run(["sh", "-c", f"{{ {command}; }} > {both} 2>&1", script], check=True, timeout=60)
    assert both.read_text() == "export\n"


def test_an_export_terminated_midway_leaves_no_file_beside_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM (a `timeout`, systemd) ended the process where it was: the hidden ``.partial`` file beside the output
    stayed. It is now raised as Ctrl-C is, and the file removed on the way out."""

    def terminated_midway(_config: object, _where: object, out: TextIO, _err: TextIO) -> None:
        out.write("half\n")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal's handler raises here

    monkeypatch.setattr(cli, "_answered_config", lambda _args: ServiceConfig())
    monkeypatch.setattr(acker.export, "span", lambda *_args: None)
    monkeypatch.setattr(acker.export, "export_partition", terminated_midway)
    output = tmp_path / "export.jsonl"
    output.write_text("kept\n")
    args = argparse.Namespace(partition=0, from_offset=None, to_offset=None, output=str(output))
    with pytest.raises(cli.TerminatedError):
        cli._cmd_export(args)
    assert os.listdir(tmp_path) == ["export.jsonl"] and output.read_text() == "kept\n"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler before is back
