"""Each benchmark's smoke run (`benchmarks.run_all.SMOKE`): the script runs to its end against the code as it is and
prints figures to compare, judged as `run_all` judges them (`run_all.failure`). What the figures are is not checked:
these run beside the other tests, on a machine they share (docs/benchmarks.md).

The Kafka benchmarks use the session's cluster (topics and groups of their own) rather than a broker each. They run
among the other tests, not one after another at the end of the suite: in CI that took 11 minutes of its own."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.run_all import SUITE, command_of, failure, run_benchmark

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_MIN = 15.0  # alone, the longest takes about a minute; beside the suite's other tests, a few


@contextmanager
def _one_build_at_a_time(name: str) -> Iterator[None]:
    """The Storm benchmarks build their Java side with Maven, which fetches into one local repository: two builds
    are not run at once (by other test processes either)."""
    if not name.startswith("storm"):
        yield
        return
    lock_file = ROOT / ".cache" / "benchmarks" / "maven.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.parametrize(
    ("name", "module"), [(name, module) for name, module, _ in SUITE], ids=[n for n, _, _ in SUITE]
)
def test_the_benchmark_runs_to_its_end_and_prints_figures_to_compare(
    name: str, module: str, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # `python -m benchmarks....`
    with _one_build_at_a_time(name):
        code, stdout, stderr = run_benchmark(command_of(name, module, False, True, bootstrap), TIMEOUT_MIN * 60)
    why = failure(code, stdout, TIMEOUT_MIN)
    assert why is None, f"{name}: {why}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
