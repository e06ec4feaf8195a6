"""`acker.places`: a place from anybody's text (a header, an argument), taken only when it is one."""

from __future__ import annotations

import pytest

from acker import dlq
from acker.places import Place, partition_and_offset, place_of
from acker.retries import origin_partition

NOT_PLACES = ["?", "t/3", "t/-1/4", "t/3/+4", "t/3/ 4", "t/²/4", "t/3/1_000", "a\x00b/3/1", "a b/3/1", "/3/1",
              "a/b/3/1", f"t/{2**31}/0", f"t/3/{2**63}", "t/3/4/", "t/3/" + "1" * 5000]  # fmt: skip


def test_a_message_id_names_its_topic_partition_and_offset() -> None:
    assert place_of("wc.sentences/3/42") == Place("wc.sentences", 3, 42)
    assert partition_and_offset("3/42") == (3, 42) and partition_and_offset("42") == (0, 42)
    assert place_of(f"t/{2**31 - 1}/{2**63 - 1}") == Place("t", 2**31 - 1, 2**63 - 1)  # the largest Kafka has


@pytest.mark.parametrize("text", NOT_PLACES)
def test_what_is_not_a_place_is_none_never_an_exception(text: str) -> None:
    assert place_of(text) is None
    assert origin_partition(text) == 0  # a dead letter's origin that is none: its copy goes to partition 0


@pytest.mark.parametrize("text", ["+4", " 4", "٤", "1_000", "0/+4", "-1/4", "4/", ""])
def test_a_place_the_commands_take_is_refused_alike(text: str) -> None:
    assert partition_and_offset(text) is None
    with pytest.raises(dlq.DlqError, match="not a record's place"):
        dlq.parse_coordinates(text, "t")


@pytest.mark.parametrize("text", [text for text in NOT_PLACES if text.count("/") >= 2])
def test_a_whole_place_the_commands_take_is_refused_alike(text: str) -> None:
    with pytest.raises(dlq.DlqError, match="not a record's place"):
        dlq.parse_coordinates(text, "t")


def test_a_place_of_another_topic_is_refused_by_name() -> None:
    with pytest.raises(dlq.DlqError, match="'u/0/4' is a record of 'u', not of 't'"):
        dlq.parse_coordinates("u/0/4", "t")
    assert dlq.parse_coordinates("t/2/7", "t") == (2, 7)
