"""The replay job's progress records (`spark_jobs.replay_job._progress`), and where a micro-batch run again goes on
(`_Publisher._published_before`): after the last nack an earlier run published, found by key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_jobs.replay_job import _WHOLE, _progress, _Publisher


def test_a_progress_record_says_its_batch_its_count_and_the_last_nack_published() -> None:
    assert _progress(b"7") == (7, _WHOLE, None)
    assert _progress(b"7/40") == (7, 40, None)  # the older form
    assert _progress(b"7/40/sp/src/3/1200") == (7, 40, ("sp", "src/3/1200"))  # a message id keeps its slashes
    assert _progress(b"-1") == (-1, _WHOLE, None)


def _rows(*offsets: int) -> list[SimpleNamespace]:
    return sorted((SimpleNamespace(spout="sp", msg_id=f"src/0/{o}") for o in offsets), key=lambda r: r.msg_id)


def _after(last: int, done: int | None, key: tuple[str, str] | None) -> _Publisher:
    publisher = object.__new__(_Publisher)  # only what an earlier run recorded: no producer
    publisher.last, publisher.last_done, publisher.last_key = last, done, key
    return publisher


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [((0, 1, 2, 3, 4, 5), 4), ((1, 3, 4, 5), 2), ((4, 5), 0), ((0, 1, 2, 3), 4)],
)
def test_a_batch_run_again_goes_on_after_the_last_nack_published_whatever_rows_are_left(
    offsets: tuple[int, ...], expected: int
) -> None:
    assert _after(0, 4, ("sp", "src/0/3"))._published_before(0, _rows(*offsets)) == expected


def test_the_older_progress_form_goes_on_by_position_and_other_batches_from_the_start() -> None:
    assert _after(0, 4, None)._published_before(0, _rows(0, 1, 2, 3, 4, 5)) == 4
    assert _after(0, 4, None)._published_before(0, _rows(0, 1)) == 2  # never beyond the rows
    assert _after(0, None, None)._published_before(1, _rows(0, 1)) == 0
    assert _after(0, 4, ("sp", "src/0/3"))._published_before(1, _rows(0, 1)) == 0
