"""`acker.acked.place_of`: a message id from anybody's header, taken for a record's place only when it is one."""

from __future__ import annotations

import pytest

from acker.acked import place_of


def test_a_message_id_names_its_topic_partition_and_offset() -> None:
    assert place_of("wc.sentences/3/42") == ("wc.sentences", 3, 42)


@pytest.mark.parametrize(
    "msg_id",
    ["?", "t/0", "t/-1/4", "t/0/+4", "t/0/ 4", "t/²/4", "t/0/1_000", "a\x00b/0/1", "a b/0/1", "/0/1",
     f"t/{2**31}/0", f"t/0/{10**18}"],
)  # fmt: skip
def test_what_is_not_a_place_is_none_never_an_exception(msg_id: str) -> None:
    assert place_of(msg_id) is None
