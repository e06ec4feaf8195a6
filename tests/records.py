"""A consumed record as unit tests of the Kafka edge hand it to the code under test: what that code reads of a
`confluent_kafka.Message`, without a consumer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Consumed:
    """A record of ``topic``'s ``partition`` at ``offset``, read without error; stamped with its offset."""

    _partition: int
    _offset: int
    _value: bytes
    _topic: str = "acker"

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_000_000 + self._offset
