"""The replay job's progress records (`spark_jobs.replay_job._progress`), and where a micro-batch run again goes on
(`_Publisher._published_before`): after the last nack an earlier run published, found by key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_jobs.replay_job import _WHOLE, _checked_order, _parts, _progress, _Publisher


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


def _resumed(publisher: _Publisher, batch: int, rows: list[SimpleNamespace]) -> tuple[int, list[str]]:
    """How many of ``rows`` were published before, and the message ids of the others, as `publish` reads on."""
    done, left = publisher._published_before(batch, iter(rows))
    return done, [row.msg_id for row in left]


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [((0, 1, 2, 3, 4, 5), (4, [4, 5])), ((1, 3, 4, 5), (2, [4, 5])), ((4, 5), (0, [4, 5])), ((0, 1, 2, 3), (4, []))],
)
def test_a_batch_run_again_goes_on_after_the_last_nack_published_whatever_rows_are_left(
    offsets: tuple[int, ...], expected: tuple[int, list[int]]
) -> None:
    done, left = expected
    assert _resumed(_after(0, 4, ("sp", "src/0/3")), 0, _rows(*offsets)) == (done, [f"src/0/{o}" for o in left])


def test_the_older_progress_form_goes_on_by_position_and_other_batches_from_the_start() -> None:
    assert _resumed(_after(0, 4, None), 0, _rows(0, 1, 2, 3, 4, 5)) == (4, ["src/0/4", "src/0/5"])
    assert _resumed(_after(0, 4, None), 0, _rows(0, 1)) == (2, [])  # never beyond the rows
    assert _resumed(_after(0, None, None), 1, _rows(0, 1)) == (0, ["src/0/0", "src/0/1"])
    assert _resumed(_after(0, 4, ("sp", "src/0/3")), 1, _rows(0, 1)) == (0, ["src/0/0", "src/0/1"])


def test_nacks_given_out_of_order_are_refused_and_parts_are_cut_from_the_stream() -> None:
    """`publish` reads a batch from Spark a part at a time: its parts (and the progress naming their last nacks) are
    the same at every run only if the nacks come in key order."""
    with pytest.raises(ValueError, match="out of order"):
        list(_checked_order(_rows(1, 2)[::-1]))
    with pytest.raises(ValueError, match="out of order"):  # a key twice: strictly in order, one row a key
        list(_checked_order(_rows(1, 1)))
    assert [([r.msg_id for r in part], end, whole) for part, end, whole in _parts(iter(_rows(1, 2, 3)), 2, 5)] == [
        (["src/0/1", "src/0/2"], 7, False),
        (["src/0/3"], 8, True),
    ]
    assert list(_parts(iter([]), 2, 5)) == [([], 5, True)]  # none left: one empty part still ends the batch
