"""The word count's traced spout: each sentence forwarded with its origin (`Emitter.source`, which the spout takes
from its own replay topic only: tests/unit/test_stage_functions.py) and its own headers."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from acker.examples.wordcount import SENTENCE, traced_sentences


class _Emitter:
    def __init__(self, source: str) -> None:
        self.source = source
        self.emitted: list[tuple[str, Any, Any, list[tuple[str, Any]]]] = []

    def emit(self, topic: str, value: Any, key: Any = None, headers: Any = None) -> None:
        self.emitted.append((topic, value, key, headers))


def test_each_sentence_is_forwarded_with_its_headers_and_its_origin() -> None:
    emitter = _Emitter("wc.sentences/1/7")
    headers: list[tuple[str, str | bytes | None]] = [("mine", b"kept")]
    record = Message(topic="acker.replay.wc", partition=0, offset=3, value=b"a b", key=b"k", headers=headers)
    traced_sentences("wc.split")(record, emitter)  # type: ignore[arg-type]
    assert emitter.emitted == [("wc.split", b"a b", b"k", [("mine", b"kept"), (SENTENCE, b"wc.sentences/1/7")])]
