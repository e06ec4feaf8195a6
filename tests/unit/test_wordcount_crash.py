"""The word count's injected crash: one process of a stage crashes, whichever gets there first."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

from acker.examples import wordcount, wordcount_cli


class _CrashedError(Exception):
    pass


def _exit(_code: int) -> NoReturn:
    raise _CrashedError


def test_of_the_processes_given_one_marker_only_the_first_to_get_there_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash was given to split process 0 alone: where the group gave it no partition, or a share below the
    count, `acker wordcount run --crash-split-after` and the demo ended without the crash they promise."""
    monkeypatch.setattr(os, "_exit", _exit)  # the crash, in this process: an exception
    marker = str(tmp_path / "split")
    first, second = wordcount._crasher(2, marker), wordcount._crasher(2, marker)
    next(second)
    next(first)
    next(first)
    with pytest.raises(_CrashedError):
        next(first)
    for _ in range(10):
        next(second)  # past the count too, after the first crashed: goes on
    alone = wordcount._crasher(1)
    next(alone)
    with pytest.raises(_CrashedError):
        next(alone)


def test_the_crash_markers_directory_is_made_when_needed_and_removed_at_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `Stages` made a directory in /tmp at once, removed only by its `stop`: each run that failed before it
    started its stages (a demo whose broker could not be reached) and each test that never stopped one left one."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    wordcount_cli.PipelineStages(log=lambda _line: None)
    assert list(tmp_path.iterdir()) == []
    stages = wordcount_cli.PipelineStages(log=lambda _line: None)
    marker = stages.crash_flags("split", 5)[1].removeprefix("--crash-marker=")
    Path(marker).touch()  # a split process crashed
    assert stages.crashed("split") and len(list(tmp_path.iterdir())) == 1
    stages.stop()
    assert list(tmp_path.iterdir()) == [] and stages.crashed("split")


def test_a_process_restarted_before_its_stages_crash_came_keeps_the_crash_flags_and_after_it_drops_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split process killed and restarted (the demo's --chaos) lost its crash flags: when it was the one with the
    partitions to get there, the run ended without the crash it promises."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stages = wordcount_cli.PipelineStages(log=lambda _line: None)
    flags = stages.crash_flags("split", 5)
    try:
        stages.start("split-0", ([sys.executable, "-c", "pass", *flags], {}))
        stages.running["split-0"][1].wait(30)
        stages.restart("split-0")
        assert stages.running["split-0"][0][-2:] == flags
        stages.running["split-0"][1].wait(30)
        Path(flags[1].removeprefix("--crash-marker=")).touch()  # the stage's crash came
        stages.restart("split-0")
        assert stages.running["split-0"][0][-1] == "pass" and stages.restarts == 2
    finally:
        stages.stop()
