"""`acker reach run` as its steps' supervisor: a step process that exits is started again, up to a bound."""

from __future__ import annotations

import sys
import time

import pytest

from acker.examples import reach
from acker.examples.stages import Stages


def _exited(stages: Stages, name: str) -> None:
    stages.running[name][1].wait(30)


def test_a_step_that_exits_is_started_again_up_to_its_bound_and_then_said_down_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step stops (exit 2) when Kafka stays away past its waits; `reach run` left it down, and every request
    after that ran out of time, saying only "no answer before its deadline"."""
    monkeypatch.setattr(reach, "STEP_RESTARTS", 2)
    stages = Stages()
    try:
        stages.start("step 1.0", ([sys.executable, "-c", "raise SystemExit(2)"], {}))
        stages.start("step 3.0", ([sys.executable, "-c", "import time; time.sleep(60)"], {}))
        restarting = reach.Restarting(stages)
        for _ in range(reach.STEP_RESTARTS + 2):
            _exited(stages, "step 1.0")
            restarting()
        assert stages.running["step 3.0"][1].poll() is None and stages.restarts == 2
        assert restarting.restarts == {"step 1.0": 2}
        said = capsys.readouterr().err.splitlines()
        assert said == [
            "step 1.0 exited with status 2: started again (1 of 2)",
            "step 1.0 exited with status 2: started again (2 of 2)",
            "step 1.0 exited with status 2, after 2 restarts: it stays down",
        ]
    finally:
        started = time.monotonic()
        stages.stop(60)
    assert time.monotonic() - started < 30  # the sleeping one stopped by its SIGTERM
