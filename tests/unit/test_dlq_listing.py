"""How `acker dlq redrive` names the records of a partial failure: each when they are few, runs when many (a
re-drive of 150,000 letters named every one of them in its error)."""

from __future__ import annotations

from acker.dlq import _listed


def test_a_few_records_are_named_each() -> None:
    assert _listed(["d/0/3", "d/0/4"]) == "['d/0/3', 'd/0/4']"
    assert _listed([]) == ""


def test_many_records_are_named_as_runs_of_one_partition_and_reason() -> None:
    delivered = ["d/1/8", "d/1/5", "d/1/7"] + [f"d/0/{i}" for i in range(1, 150_000, 2)]  # as reported: per target
    delivered += [f"d/0/{i}" for i in range(0, 150_000, 2)]  # partition, not in the letters' order
    assert _listed(delivered) == "150003 records: d/0/0 .. d/0/149999; d/1/5; d/1/7 .. d/1/8"
    refused = [f"d/0/{i}: too large" for i in range(25)] + ["d/0/25: refused", "d/0/26: too large"]
    assert _listed(refused) == "27 records: d/0/0 .. d/0/24: too large; d/0/25: refused; d/0/26: too large"
