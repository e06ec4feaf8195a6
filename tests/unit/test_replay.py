"""Offline replay: the JSON-lines codec and the `acker replay` command."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from acker.cli import main
from acker.core import Tracker
from acker.core.outcomes import Acked, Nacked, NackReason, Outcome
from acker.replay import format_message, parse_message, replay
from acker.workload import WorkloadSpec, generate
from tests.strategies import scenarios

LINES = [
    '{"type":"ack","anchor":5,"value":3}',
    '{"type":"init","anchor":5,"spout":"S","msg_id":"M","value":3}',
    '{"type":"init","anchor":-9,"spout":"S","msg_id":"N","value":1}',
    '{"type":"fail","anchor":-9}',
    '{"type":"init","anchor":11,"spout":"S","msg_id":"O","value":1}',
    '{"type":"tick"}',
    '{"type":"tick"}',
    '{"type":"tick"}',
]


def test_replay_outputs_outcomes_in_decision_order(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    assert main(["replay", str(path)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out == [
        {"outcome": "ack", "anchor": 5, "spout": "S", "msg_id": "M"},
        {"outcome": "nack", "anchor": -9, "spout": "S", "msg_id": "N", "reason": "failed"},
        {"outcome": "nack", "anchor": 11, "spout": "S", "msg_id": "O", "reason": "timeout"},
    ]


def test_columnar_engine_gives_the_same_outcomes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\nnot json\n")
    assert main(["replay", "--engine", "columnar", "--stats", str(path)]) == 1
    captured = capsys.readouterr()
    assert "line 9:" in captured.err and "acked=1" in captured.err
    assert main(["replay", str(path)]) == 1
    assert captured.out == capsys.readouterr().out  # whole outcomes (reasons too), as the reference engine's


def test_a_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def test_options_reach_the_tracker(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`acker replay` decides each tree as a service run with the same options did: an operator replays an incident
    with them (a run that dropped them decided nothing here, and passed)."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([
        '{"type":"init","anchor":11,"spout":"S","msg_id":"O","value":1}',
        '{"type":"init","anchor":12,"spout":"S","msg_id":"P","value":1}',
        '{"type":"tick"}',
        '{"type":"ack","anchor":11,"value":2}',  # an update of O, not its completion
        '{"type":"tick"}',
    ]) + "\n")  # fmt: skip

    def decided(*options: str) -> list[tuple[str, str]]:
        assert main(["replay", "--buckets", "2", *options, str(path)]) == 0
        return [(o["msg_id"], o.get("reason", "")) for o in map(json.loads, capsys.readouterr().out.splitlines())]

    assert decided() == [("O", "timeout"), ("P", "timeout")]
    assert decided("--high-water", "1") == [("P", "overload"), ("O", "timeout")]  # P came past the high-water mark
    assert decided("--relocate-on-update") == [("P", "timeout")]  # O's update moved it to the newest bucket
    assert main(["replay", "--buckets", "1", str(path)]) == 2
    assert "buckets must be between 2 and" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1,2]", "not a JSON object"),
        ('{"type":"frobnicate","anchor":1}', "unknown message type"),
        ('{"type":"ack","anchor":0,"value":1}', "non-zero"),
        ('{"type":"ack","anchor":"7","value":1}', "must be an integer"),
        ('{"type":"ack","anchor":7,"value":0}', "an ack's value is 0"),  # as the service refuses it
        ('{"type":"init","anchor":7,"value":1,"msg_id":"m"}', "missing field 'spout'"),
        ('{"type":"init","anchor":7,"value":1,"msg_id":"m","spout":5}', "'spout' must be a string"),
        ('{"type":"init","anchor":7,"value":1,"msg_id":"m","spout":""}', "cannot name an outcome topic"),
        ('{"type":"init","anchor":7,"value":1,"msg_id":"m","spout":"a b/c"}', "cannot name an outcome topic"),
        ('{"type":"init","anchor":7,"value":1,"msg_id":"m","spout":"dlq"}', "or is reserved"),
        ('{"type":"ok","anchor":7,"tuple":9223372036854775808}', "64-bit"),
        ('{"type":"ack","anchor":7}', "missing field 'value'"),  # said apart from a null
        ('{"type":"ack","anchor":7,"value":null}', "field 'value' must be an integer, got None"),
        ('{"type":"ack","anchor":' + "1" * 5000 + ',"value":1}', "not JSON this reads: a number of more than 4,300"),
        ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ],
)
def test_malformed_lines_are_reported_counted_and_skipped(line: str, reason: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    lines = [LINES[1], line, '{"type":"ack","anchor":5,"value":3}']
    assert replay(Tracker(), lines, out, err) == 1
    assert "line 2: " in err.getvalue() and reason in err.getvalue()
    assert json.loads(out.getvalue())["outcome"] == "ack"  # the good lines around it still count


def test_cli_exit_status_is_non_zero_after_a_bad_line_but_all_good_lines_run(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("garbage\n" + "\n".join(LINES) + "\n\n{\n")
    run = subprocess.run(
        [sys.executable, "-m", "acker.cli", "replay", "-", "--stats"],
        input=path.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert len(run.stdout.splitlines()) == 3
    assert "line 1:" in run.stderr and "line 11:" in run.stderr and "2 malformed line(s)" in run.stderr
    assert "acked=1" in run.stderr


def test_a_file_and_stdin_end_lines_at_the_same_bytes(tmp_path: Path) -> None:
    """A file was read with universal newlines, stdin was not: a lone "\r" ended a line of the file only, and the
    same bytes were other lines, other errors, by their way in. "\r\n" ends one line either way."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"type":"tick"}\r{"type":"fail","anchor":0}\n' + LINES[1].encode() + b"\r\n"
                     + b'{"type":"ack","anchor":5,"value":3}\r\n')  # fmt: skip
    said = []
    for argv, stdin in (([str(path)], None), (["-"], path.read_bytes())):
        run = subprocess.run([sys.executable, "-m", "acker.cli", "replay", *argv], input=stdin, capture_output=True,
                             check=False)  # fmt: skip
        said.append((run.returncode, run.stdout, run.stderr))
    assert said[0] == said[1]
    assert said[0][0] == 1 and b"line 1: not JSON: Extra data" in said[0][2] and b"1 malformed" in said[0][2]
    assert json.loads(said[0][1])["outcome"] == "ack"


@settings(max_examples=50)
@given(scenarios(fail_rate=0.1))
def test_replay_of_formatted_messages_matches_the_tracker(case) -> None:  # type: ignore[no-untyped-def]
    _, arrivals = case
    messages = [m for m, _ in arrivals]
    assert [parse_message(format_message(m)) for m in messages] == messages
    direct = Tracker().handle_all(messages)
    out = io.StringIO()
    assert replay(Tracker(), [format_message(m) for m in messages], out, io.StringIO()) == 0
    expected = [
        {"outcome": "ack", "anchor": o.anchor, "spout": o.spout, "msg_id": o.msg_id}
        if isinstance(o, Acked)
        else {"outcome": "nack", "anchor": o.anchor, "spout": o.spout, "msg_id": o.msg_id, "reason": o.reason.value}
        for o in direct
    ]
    assert [json.loads(line) for line in out.getvalue().splitlines()] == expected


@pytest.mark.parametrize("engine", ["reference", "columnar"])
def test_core_demo_reports_every_outcome_right(engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--trees", "3000", "--fail-rate", "0.02", "--drop-rate", "0.02", "--engine", engine]
    assert main(argv) == 0
    assert "every record has exactly its right outcome" in capsys.readouterr().out


def test_core_demo_finds_outcomes_that_name_another_tree_or_no_record(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It compared message ids and kinds only: a tracker that gave an outcome the wrong anchor or spout (which the
    spout drops as another tree's), or made one up, was said to give every record its right outcome."""
    real = Tracker.handle_all

    def misnaming(self: Tracker, messages: Any) -> list[Outcome]:
        outcomes = real(self, messages)
        return [replace(outcomes[0], anchor=outcomes[0].anchor ^ 1), *outcomes[1:]]

    def making_up(self: Tracker, messages: Any) -> list[Outcome]:
        return [*real(self, messages), Nacked(42, "sentences", "sentences/0/99999", NackReason.FAILED, 0)]

    for wrong in (misnaming, making_up):
        monkeypatch.setattr(Tracker, "handle_all", wrong)
        assert main(["simulate", "--trees", "500"]) == 1
        assert "FAILED" in capsys.readouterr().out


def test_core_demo_keeps_its_ticks_apart_for_a_wide_fanout(capsys: pytest.CaptureFixture[str]) -> None:
    """A tree of 300 children outlived the default tick interval, times the fewest buckets: timed out as it must
    be, and reported as a wrong outcome (the expected outcomes hold only while ticks are far apart)."""
    for argv in (["--fanout", "300", "--trees", "2000"], ["--buckets", "2", "--fanout", "60", "--trees", "5000"]):
        assert main(["simulate", *argv, "--fail-rate", "0", "--drop-rate", "0"]) == 0
        assert "every record has exactly its right outcome" in capsys.readouterr().out


def test_workload_expectations_match_the_tracker() -> None:
    workload = generate(WorkloadSpec(trees=2000, fail_rate=0.03, drop_rate=0.03, seed=7))
    got = {}
    for o in Tracker().handle_all(workload.messages):
        assert o.msg_id not in got and o.anchor == workload.anchors[o.msg_id]  # one outcome a tree, of its tree
        got[o.msg_id] = getattr(o, "reason", None)
    assert {m: (r.value if r else "ack") for m, r in got.items()} == workload.expected
    assert {"ack", "failed", "timeout"} == set(workload.expected.values())


def test_a_line_that_is_not_utf8_is_reported_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(LINES[1].encode() + b"\n" + b'{"type":"ack","anchor":5,"value":3,"x":"\xff"}\n')
    assert main(["replay", str(path)]) == 1
    assert "line 2: not UTF-8 text" in capsys.readouterr().err
