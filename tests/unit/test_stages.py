"""`Stages`: child processes by name, started again with their own commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import acker
from acker.config import ServiceConfig, own_static_id
from acker.examples import stages as stages_module
from acker.examples import wordcount_cli
from acker.examples.stages import Stages, acker_command

_EXIT_WITH_X = [sys.executable, "-c", "import os, sys; sys.exit(int(os.environ['X']))"]


def test_a_stage_started_again_has_its_own_environment_not_the_last_one_started() -> None:
    """Every process started again took the environment of the last `start`, whichever stage it was."""
    stages = Stages(log=lambda _line: None)
    try:
        stages.start("a", (_EXIT_WITH_X, {"X": "3"}))
        stages.start("b", (_EXIT_WITH_X, {"X": "4"}))
        for name in ("a", "b"):
            stages.running[name][1].wait(30)
        assert stages.exited() == [("a", 3), ("b", 4)]
        stages.restart("a")
        stages.running["a"][1].wait(30)
        assert stages.exited() == [("a", 3), ("b", 4)] and stages.restarts == 1
    finally:
        stages.stop()


_PRINT_STATIC_ID = [sys.executable, "-c", f"import os; print(os.environ.get({stages_module.STATIC_ID!r}, ''))"]


def test_each_child_gets_a_static_members_id_of_its_own_and_keeps_it_when_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`acker wordcount run --kafka group.instance.id=wx` gave every stage process the id wx: two stages fenced each
    other at their start, and the run stopped with 0 of 300 sentences decided."""
    monkeypatch.delenv(stages_module.STATIC_ID, raising=False)
    stages = Stages(log=lambda _line: None, output_dir=tmp_path)
    try:
        stages.start("split-0", (_PRINT_STATIC_ID, {stages_module.STATIC_ID: "wx"}))
        stages.start("split-1", (_PRINT_STATIC_ID, {stages_module.STATIC_ID: "wx"}))
        stages.start("count-0", (_PRINT_STATIC_ID, {}))  # none given: none made up
        stages.start("step 1.0", (_PRINT_STATIC_ID, {stages_module.STATIC_ID: "wx"}))  # Kafka refuses a space
        names = ("split-0", "split-1", "count-0", "step 1.0")
        for name in names:
            stages.running[name][1].wait(30)
        stages.restart("split-0")
        stages.running["split-0"][1].wait(30)
        printed = {
            n: (tmp_path / f"{n}.log").read_text().split() for n in ("split-0", "split-1", "count-0", "step 1.0")
        }
        assert printed == {"split-0": ["wx-split-0", "wx-split-0"], "split-1": ["wx-split-1"], "count-0": [],
                           "step 1.0": ["wx-step-1.0"]}  # fmt: skip
    finally:
        stages.stop()


@pytest.mark.parametrize(("settings_given_only", "printed"), [(False, ["env-id-acker-1"]), (True, [])],
                         ids=["inherited", "demo"])  # fmt: skip
def test_a_static_members_id_in_this_processs_environment_is_made_each_childs_own_unless_settings_are_given_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings_given_only: bool, printed: list[str]
) -> None:
    """``ACKER_KAFKA_GROUP_INSTANCE_ID`` in the runner's environment reaches every child the same way; the demo's
    children (``settings_given_only``) take none of the ``ACKER_*`` environment: no id made up there."""
    monkeypatch.setenv(stages_module.STATIC_ID, "env-id")
    stages = Stages(log=lambda _line: None, output_dir=tmp_path, settings_given_only=settings_given_only)
    try:
        stages.start("acker-1", (_PRINT_STATIC_ID, {}))
        stages.running["acker-1"][1].wait(30)
        assert (tmp_path / "acker-1.log").read_text().split() == printed
    finally:
        stages.stop()


class _Stuck:
    """A process at the edge that ignores SIGTERM: each wait runs its timeout out on the test's clock."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.killed = clock, False
        self.waits: list[float] = []

    def poll(self) -> int | None:
        return -9 if self.killed else None

    def send_signal(self, _sig: int) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        if self.killed:
            return -9
        assert timeout is not None
        self.waits.append(timeout)
        self.clock[0] += timeout
        raise subprocess.TimeoutExpired("stuck", timeout)

    def kill(self) -> None:
        self.killed = True


def test_processes_that_ignore_sigterm_are_all_killed_once_one_wait_has_run_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each waited its own ``wait_s`` in turn: the k-th stuck process was killed k times ``wait_s`` after the SIGTERM
    (`acker reach run`'s seven steps at 60 s each: 7 minutes)."""
    clock = [0.0]
    monkeypatch.setattr(stages_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    stages = Stages(log=lambda _line: None)
    stuck = [_Stuck(clock) for _ in range(3)]
    stages.running = {f"s{i}": ([], process) for i, process in enumerate(stuck)}  # type: ignore[misc]
    stages.stop(wait_s=10)
    assert clock[0] == 10 and all(process.killed for process in stuck)
    assert [process.waits for process in stuck] == [[10.0], [0.0], [0.0]]


def test_a_stage_runs_the_acker_package_of_its_runner_not_sources_in_its_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m`` put the working directory first on a stage's path: run where sources lie beside an installed
    package (the image's copy), every stage imported them, whose ``acker.schemas`` exists only installed."""
    copy = tmp_path / "acker"
    copy.mkdir()
    (copy / "__init__.py").write_text("raise ImportError('the copy in the working directory')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # a relative entry would name the copy too, whatever -P says
    argv = acker_command("topics", "--help")
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0 and "the copy" not in run.stderr, run.stderr
    monkeypatch.chdir(Path(acker.__file__).resolve().parent.parent)  # a runner of the sources there: the same
    assert "-P" not in acker_command("run")


@pytest.mark.parametrize(
    ("kafka", "why", "added"),
    [
        ({"group.instance.id": "wx"}, "NON_EMPTY_GROUP: Broker: The group is not empty", True),
        ({"group.instance.id": "wx"}, "GROUP_AUTHORIZATION_FAILED: Broker: Group authorization failed", False),
        ({}, "NON_EMPTY_GROUP: Broker: The group is not empty", False),
    ],
    ids=["static-not-empty", "static-refused-otherwise", "dynamic"],
)
def test_a_group_left_behind_by_static_members_says_why(kafka: dict[str, str], why: str, added: bool) -> None:
    """`acker wordcount run` with static members left its groups behind, "not empty", without saying why."""
    hint = wordcount_cli._why_not_empty(ServiceConfig(kafka=kafka), why)
    assert hint == (" (static members leave a group only once their session ends)" if added else "")


def test_a_childs_static_members_id_is_one_the_java_client_takes() -> None:
    """Spark's Java client refuses an id of other characters than letters, digits, ".", "_" and "-", or of more than
    249 of them."""
    assert own_static_id("wx", "step 1.0") == "wx-step-1.0"
    assert own_static_id("a" * 300, "split-0") == "a" * 249
