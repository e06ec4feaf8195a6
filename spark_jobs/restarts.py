"""When a job whose query failed starts again, in its process.

A Spark query stops for good at its first failed micro-batch, and a Kafka outage of over a minute is one: Spark's
Kafka source gives up on a position after its consumer's ``default.api.timeout.ms`` (60 s), the replay job on a
transaction the broker did not answer. Started again on its checkpoint, a job carries on where it stopped, nothing
lost or done twice (a replay transaction left open is settled by the new producer's ``init_transactions``); so the
jobs start their queries again themselves, as a supervisor would, rather than stop until someone notices.

Invariant: at most ``limit`` starts in a row, each after a longer delay; a job that then ran ``healthy_s`` without
failing has recovered, and its next failure begins a new row. A failure that is not an outage (a topic deleted, a
bug) so ends the job after ``limit`` tries, each said with its cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acker.retries import Backoff

BACKOFF = Backoff(first_ms=5_000, factor=2.0, max_ms=120_000)  # 5 s, 10 s, … 2 min: past a broker's restart
HEALTHY_S = 600.0


@dataclass
class Restarts:
    """The restarts left to a job: `after_failure` gives the delay before the next start, or None when there is none
    left; `started` says when the job started (again)."""

    limit: int
    backoff: Backoff = BACKOFF
    healthy_s: float = HEALTHY_S
    row: int = field(default=0, init=False)  # restarts in the current row
    _since: float = field(default=0.0, init=False)

    def started(self, now: float) -> None:
        self._since = now

    def after_failure(self, now: float) -> float | None:
        if now - self._since >= self.healthy_s:
            self.row = 0
        if self.row >= self.limit:
            return None
        self.row += 1
        return self.backoff.delay_ms(self.row) / 1000
