"""The word count's injected crash: one process of a stage crashes, whichever gets there first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from acker.examples import wordcount


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
