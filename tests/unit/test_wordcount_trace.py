"""The word count's traced spout: each sentence forwarded with its origin, a replay's origin taken from the spout's
own replay topic only."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from acker.examples.wordcount import SENTENCE, traced_sentences
from acker.retries import ORIGIN


class _Emitter:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, Any, Any, list[tuple[str, Any]]]] = []

    def emit(self, topic: str, value: Any, key: Any = None, headers: Any = None) -> None:
        self.emitted.append((topic, value, key, headers))


def _traced(record: Message) -> bytes:
    emitter = _Emitter()
    traced_sentences("wc.split", "acker.replay.wc")(record, emitter)  # type: ignore[arg-type]
    [(topic, value, _key, headers)] = emitter.emitted
    assert topic == "wc.split" and value == record.value()
    return bytes(dict(headers)[SENTENCE])


def test_a_replay_is_traced_to_its_origin_and_any_other_record_to_itself() -> None:
    """A source record copied from another pipeline's replay topic carries that pipeline's origin header: taken for
    its own, the demo's books credited its counts to another sentence."""
    origin: list[tuple[str, str | bytes | None]] = [(ORIGIN, b"wc.sentences/1/7")]
    replayed = Message(topic="acker.replay.wc", partition=0, offset=3, value=b"a b", headers=origin)
    assert _traced(replayed) == b"wc.sentences/1/7"
    copied = Message(topic="wc.sentences", partition=2, offset=9, value=b"a b", headers=origin)
    assert _traced(copied) == b"wc.sentences/2/9"
    assert _traced(Message(topic="wc.sentences", partition=0, offset=4, value=b"c")) == b"wc.sentences/0/4"
