"""Which produced records are still in flight, and whether everything produced before some point is delivered.

The service may commit a recovery offset only once every outcome decided before it has been delivered. Rather
than flushing the producer (which stalls the loop for a round trip), it takes a *barrier* when it computes the
offsets and commits them once the barrier has passed: every record produced before it was delivered. Records are
numbered in production order; delivery reports may come in any order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError


class DeliveryTracker:
    __slots__ = ("_next", "_undelivered", "failure")

    def __init__(self) -> None:
        self._next = 0
        self._undelivered: set[int] = set()
        self.failure: KafkaError | None = None  # the first delivery that failed for good

    def track(self) -> Callable[[KafkaError | None, Any], None]:
        """A delivery callback for the next record produced."""
        seq = self._next
        self._next += 1
        self._undelivered.add(seq)

        def delivered(error: KafkaError | None, _record: Any) -> None:
            self._undelivered.discard(seq)
            if error is not None and self.failure is None:
                self.failure = error

        return delivered

    def barrier(self) -> int:
        """A point after every record produced so far."""
        return self._next

    def passed(self, barrier: int) -> bool:
        """True once every record produced before ``barrier`` has a delivery report."""
        return not self._undelivered or min(self._undelivered) >= barrier

    @property
    def in_flight(self) -> int:
        return len(self._undelivered)
