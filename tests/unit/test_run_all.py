"""The benchmark runner ends a benchmark that outlives its time, and every process the benchmark started."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from benchmarks import run_all
from benchmarks.run_all import run_benchmark


def test_a_benchmark_past_its_time_is_ended_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('| table |', flush=True)\n"
        "time.sleep(60)\n"
    )
    began = time.monotonic()
    code, stdout, _ = run_benchmark([sys.executable, "-c", script], timeout_s=3)
    assert code is None and "| table |" in stdout and time.monotonic() - began < 30
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild), "the benchmark's own child outlived it"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie (exited, reaped by init later) is not alive
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_the_suite_fails_when_one_benchmark_fails_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scripts/test.sh` (CI) relies on the exit status: a benchmark that fails must fail the run."""
    (tmp_path / "fine_bench.py").write_text("print('| run | ratio |'); print('| baseline | 1.00 |')\n")
    (tmp_path / "broken_bench.py").write_text("raise SystemExit('cannot start')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(run_all, "SUITE", [("fine", "fine_bench", "passes"), ("broken", "broken_bench", "fails")])
    monkeypatch.setattr("benchmarks.run_all.signal.signal", lambda *_: None)  # not in this process
    report = tmp_path / "report.md"
    monkeypatch.setattr(sys, "argv", ["run_all", "--output", str(report)])
    assert run_all.main() == 1
    assert "failed: broken" in capsys.readouterr().err and "| baseline | 1.00 |" in report.read_text()
    monkeypatch.setattr(run_all, "SUITE", [("fine", "fine_bench", "passes")])
    assert run_all.main() == 0


def test_a_benchmark_without_figures_to_compare_fails_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quick runs in CI checked only that each script ran to its end: one that printed no table, or a ratio of
    nan, passed."""
    (tmp_path / "nan_bench.py").write_text("print('| run | ratio |'); print('| tracked | nan |')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(run_all, "SUITE", [("nan", "nan_bench", "a ratio of nan")])
    monkeypatch.setattr("benchmarks.run_all.signal.signal", lambda *_: None)  # not in this process
    report = tmp_path / "report.md"
    monkeypatch.setattr(sys, "argv", ["run_all", "--output", str(report)])
    assert run_all.main() == 1
    assert "failed: nan" in capsys.readouterr().err
    assert "**failed** (its tables have cells that are not measures: nan)" in report.read_text()


@pytest.mark.parametrize(
    ("stdout", "why"),
    [
        ("measured 3 things\n", "it printed no table"),
        ("| run | messages/s |\n|---|---:|\n| a | 5 |\n", "its tables give no ratio to a baseline"),
        ("| run | ratio |\n|---|---:|\n| a | inf |\n", "its tables have cells that are not measures: inf"),
        ("| run | × one instance |\n|---:|---:|\n| 1 | 1.00 |\n", None),
        ("| measure | value |\n|---|---:|\n| replay / baseline | 1.7 |\n", None),
        ("| CPU | tracked / untracked |\n|---|---:|\n| split | 0.99 (0.99-0.99) |\n", None),
        ("| mode | acker | ratio |\n|---|---|---:|\n| untracked | - | 1.00 |\n", None),  # "-": nothing to measure
    ],
)
def test_figures_to_compare_are_tables_with_a_ratio_and_numbers(stdout: str, why: str | None) -> None:
    assert run_all.missing_figures(stdout) == why


def test_smoke_arguments_name_benchmarks_of_the_suite_and_add_to_their_quick_run() -> None:
    """A name `SMOKE` misspelt would leave that benchmark's whole quick workload in CI's smoke run, silently."""
    names = {name for name, _, _ in run_all.SUITE}
    assert set(run_all.SMOKE) <= names
    assert run_all.command_of("replay-batch", "benchmarks.replay_batch_bench", quick=False, smoke=True)[1:] == [
        "-m", "benchmarks.replay_batch_bench", "--quick", "--nacks", "40000",
    ]  # fmt: skip
    assert run_all.command_of("replay-batch", "m", quick=True, smoke=False)[1:] == ["-m", "m", "--quick"]
    assert run_all.command_of("steady", "m", quick=False, smoke=False)[1:] == ["-m", "m"]


def test_a_cluster_named_goes_to_the_benchmarks_that_use_kafka_alone() -> None:
    """The others take no ``--bootstrap-servers``: given one, their argument parser would end them."""
    names = {name for name, _, _ in run_all.SUITE}
    assert run_all.KAFKA.issubset(names)
    assert run_all.command_of("commit", "m", quick=False, smoke=True, bootstrap="h:1")[-2:] == [
        "--bootstrap-servers",
        "h:1",
    ]
    assert "--bootstrap-servers" not in run_all.command_of("core", "m", quick=False, smoke=True, bootstrap="h:1")
    assert "--bootstrap-servers" not in run_all.command_of("commit", "m", quick=False, smoke=True)
