"""`Stages`: child processes by name, started again with their own commands."""

from __future__ import annotations

import sys

from acker.examples.stages import Stages

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
