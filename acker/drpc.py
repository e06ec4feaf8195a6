"""A request/response front over a coordinated chain (Storm's Linear DRPC): send a request, wait for its answer.

A request is a record on the chain's first topic (``N.step0``) with a fresh request id (``acker.request``, which is
also the correlation id) and its deadline (``acker.request.deadline``, epoch ms); the chain answers on ``N.results``
with the request id as key and ``acker.request.status`` ``ok`` or ``failed`` (`acker.kafka.coordinated_stage`).
A request that is not answered by its deadline (plus a grace period for the failure to reach the answer, and the
time to read the answers written by then) is reported as timed out: a call never waits forever.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Callable

from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from acker.config import ServiceConfig
from acker.console import printable
from acker.coordinated import DEADLINE_MAX_S, short_why
from acker.errors import AckerError
from acker.headers import read_headers, text
from acker.kafka.clients import (
    AsWritten,
    KafkaClientError,
    answering,
    consume_available,
    end_offsets,
    partition_count,
    produce_reporting,
    release,
)
from acker.kafka.coordinated_stage import DEADLINE, REQUEST, STATUS, WHY, Chain
from acker.kafka.held_reads import WatchedConsumer

log = logging.getLogger(__name__)

SEND_WAIT_S = 30.0  # how long `send` waits for a request's delivery, at most
GRACE_S = 5.0  # after the deadline, how long to wait for the chain's "failed" answer before giving up
READ_TO_END_S = 5.0  # then, how long at most to read the answers written by then (`DrpcClient._read_to_ends`)
ANSWER_KEPT_S = 600.0  # an answer read for a request not waited for yet is kept this long past that request's time


class DrpcError(AckerError):
    """A request that failed in the chain, or got no answer in time."""


class DrpcClient:
    def __init__(self, config: ServiceConfig, chain: Chain) -> None:
        self.chain, self._config = chain, config
        self._closed = False
        # First: a login refused said as such within seconds, a cluster away within 10 s.
        answering(config.client(), chain.topic(0))
        self.producer = Producer(config.producer(**{"enable.idempotence": True, "linger.ms": 1}))
        self.partitions = partition_count(config.client(), chain.topic(0))
        group = f"{chain.name}.client-{uuid.uuid4().hex[:8]}"
        # Told where a partition's end is when it has read it (`_read_to_ends`). Answers of committed transactions
        # only, whatever the shared settings say: a joining step's batch that was aborted (its process died, or was
        # fenced) may have written an answer the chain later gives otherwise.
        self.consumer = WatchedConsumer(config.stream_consumer(**{"group.id": group, "enable.auto.commit": False,
                                                         "enable.partition.eof": True,
                                                         "isolation.level": "read_committed"}),
                                        config.open_transaction_warn_s)  # fmt: skip
        results = [TopicPartition(chain.results, p) for p in range(partition_count(config.client(), chain.results))]
        # From the ends as they are now: an answer to a request sent after this cannot be missed.
        ends = end_offsets(self.consumer, results)
        self.consumer.assign(
            [TopicPartition(tp.topic, tp.partition, end) for tp, end in zip(results, ends, strict=True)]
        )
        self._answers: dict[str, tuple[str, bytes | None]] = {}
        self._deadlines: dict[str, float] = {}
        # Requests `send` returned before their delivery was reported: their report once it comes (a list, empty
        # until then), so that a wait that ends without an answer says what became of them (`_not_sent`).
        self._unsent: dict[str, list[KafkaError | None]] = {}
        # Per results partition, the offset up to which it has been read: past the last record read, or where the
        # consumer said the partition ended (past a transaction's marker, which no record shows).
        self._read_up_to = {tp.partition: end for tp, end in zip(results, ends, strict=True)}

    def send(self, args: bytes, timeout_s: float = 30.0) -> str:
        """Send a request; return its id (see `wait`). `DrpcError` when it could not be written (the chain never sees
        it, and a wait would end only at its deadline), or was not within its deadline (written later, the steps
        drop it). Not written within 30 s, with its deadline further, it stays in the producer and is waited for: it
        may still reach the chain in time (said "not sent", a caller that sent it again had it run twice). A wait for
        it that ends unanswered says "could not be sent" when its delivery failed or had not come by then."""
        self._check_open()
        if not 0 < timeout_s <= DEADLINE_MAX_S:  # the steps dead-letter a request whose deadline is further
            raise ValueError(f"a request's timeout is more than 0 s and {DEADLINE_MAX_S} s at most, not {timeout_s}")
        self._forget_past()
        request = uuid.uuid4().hex
        sent_at = time.monotonic()  # the wait ends ``timeout_s`` + `GRACE_S` after it, however long the send takes
        deadline_ms = int((time.time() + timeout_s) * 1000)
        headers = [(REQUEST, request.encode()), (DEADLINE, str(deadline_ms).encode())]
        partition = zlib.crc32(request.encode()) % self.partitions
        reported: list[KafkaError | None] = []  # this request's delivery report, once it comes

        def delivered(error: KafkaError | None, _record: Message | None) -> None:
            reported.append(error)

        # One the producer refuses at once (over its message.max.bytes) is reported so too: a `DrpcError`, below.
        produce_reporting(self.producer, self.chain.topic(0), args, delivered, key=request.encode(),
                          partition=partition, headers=headers)  # fmt: skip
        # Its own report, not the producer's queue (`flush`): an earlier request left in it (waited for, below) made
        # one delivered at once "not sent", and a caller that sent it again had it run twice.
        flush_s = min(SEND_WAIT_S, timeout_s + GRACE_S)
        until = time.monotonic() + flush_s
        while not reported and (left := until - time.monotonic()) > 0:
            self.producer.poll(min(left, 0.1))
        failed = [error for error in reported if error is not None]
        unsent = not reported
        # Not delivered by its deadline, it never will be in time (a step drops it late): not waited for. With a
        # timeout of 25 to 30 s, the 30 s waited here end past it, and it was taken for one still in time.
        if failed or (unsent and time.monotonic() >= sent_at + timeout_s):
            reason = failed[0].str() if failed else "not delivered before its deadline"
            raise DrpcError(f"request {request} could not be sent to {self.chain.topic(0)}: {reason}")
        if unsent:
            log.warning("request %s is not delivered to %s after %.0f s: it may still be before its deadline, and is "
                        "waited for", request, self.chain.topic(0), flush_s)  # fmt: skip
            self._unsent[request] = reported
        self._deadlines[request] = sent_at + timeout_s + GRACE_S
        return request

    def _check_open(self) -> None:
        """A closed client's use is the caller's mistake, said as such (not Kafka's "Producer has been closed")."""
        if self._closed:
            raise RuntimeError(f"this DRPC client of {self.chain.name} is closed")

    def _forget_past(self) -> None:
        """Forget the requests sent and never waited for whose time is out: a long-lived client keeps only those
        that may still be waited for. One whose answer was read (while waiting for another) keeps it
        `ANSWER_KEPT_S` longer."""
        now = time.monotonic()
        for request, deadline in list(self._deadlines.items()):
            if deadline + (ANSWER_KEPT_S if request in self._answers else 0) < now:
                del self._deadlines[request]
                self._answers.pop(request, None)
                self._unsent.pop(request, None)

    def wait(self, request: str, between: Callable[[], object] | None = None) -> bytes | None:
        """The answer to ``request``; `DrpcError` if it failed or its time ran out. ``between`` is called between the
        reads of the results topic while the answer is waited for (every 0.1 s at most): the caller's own upkeep."""
        self._check_open()
        deadline = self._deadlines.get(request)
        if deadline is None:
            raise DrpcError(f"request {request} is not waited for here: not sent by this client, waited for already, "
                            "or past its deadline")  # fmt: skip
        while request not in self._answers:
            if time.monotonic() > deadline:
                self._read_to_ends(request)
                if request in self._answers:
                    break
                unsent = self._not_sent(request)
                self._forget(request)
                if unsent is not None:
                    raise DrpcError(f"request {request} could not be sent to {self.chain.topic(0)}: {unsent}")
                raise DrpcError(f"request {request} got no answer before its deadline (is every step of chain "
                                f"{self.chain.name} running? its first reads {self.chain.topic(0)})")  # fmt: skip
            self._read_answers(0.1)
            if between is not None:
                between()
        status, value = self._answers.pop(request)
        self._forget(request)
        if status != "ok":  # kept of a failed answer: why, where the chain says it (`WHY`)
            why = f": {printable(value.decode())}" if value else ""  # the chain's text: anybody's bytes
            raise DrpcError(f"request {request} failed in the chain{why}")
        return value

    def _not_sent(self, request: str) -> str | None:
        """For a request unanswered at the end of its wait, that `send` returned before its delivery was reported:
        why the chain never saw it, as its delivery report says now (failed), or its lack of one (the steps drop a
        request written after its deadline). None when it was delivered: the chain had it and did not answer.

        Said only then, not as the report comes: a delivery that failed for a timeout may have been written all the
        same (librdkafka cannot tell), and the chain's answer to it was waited for. Nor is a delivery judged late by
        its report, served whenever the producer is polled (its ``latency`` runs to then, not to the broker's
        answer)."""
        reported = self._unsent.get(request)
        if reported is None:
            return None
        self.producer.poll(0)  # its report, if it has come
        if not reported:
            return "not delivered before its deadline"
        return None if reported[0] is None else reported[0].str()

    def _forget(self, request: str) -> None:
        del self._deadlines[request]
        self._unsent.pop(request, None)

    def _read_answers(self, timeout_s: float) -> None:
        """Read what the results topic has (or wait ``timeout_s`` for it) and keep the answers waited for."""
        for record in consume_available(self.consumer, 500, timeout_s):
            error, partition, offset = record.error(), record.partition() or 0, record.offset() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:  # its offset: the end
                    self._read_up_to[partition] = max(self._read_up_to[partition], offset)
                continue
            self._read_up_to[partition] = max(self._read_up_to[partition], offset + 1)
            headers = read_headers(record)
            answered = text(headers, REQUEST)
            # Only answers to this client's requests still waited for: the results topic is shared.
            if answered in self._deadlines and answered not in self._answers:
                status, why = text(headers, STATUS) or "failed", text(headers, WHY)
                if status != "ok":  # a failed answer's reason, as the steps keep it (anybody may write there)
                    self._answers[answered] = (status, short_why(why).encode() if why else None)
                else:
                    self._answers[answered] = (status, record.value())

    def _read_to_ends(self, request: str) -> None:
        """Read the results topic up to its ends as they are now, until ``request`` is answered (`READ_TO_END_S` at
        most): an answer written in time may not have been read yet (a wait begun after the deadline, a client behind
        on a busy results topic, one written a moment ago), and a request answered is not reported as unanswered. The
        ends are asked of the broker now; the consumer's own word that it reached an end may be older than an answer
        written since. An end behind a transaction still open is waited for (the answer may be in it)."""
        give_up = time.monotonic() + READ_TO_END_S
        # The ends as written: this read_committed consumer would say the last stable offset, where a transaction
        # still open begins, and the answer in it was not waited for.
        with AsWritten(self._config.client(), f"{self.chain.name}.client-ends") as reading:
            try:
                ends = {tp.partition: reading.bounds(tp, READ_TO_END_S)[1] for tp in self.consumer.assignment()}
            except KafkaClientError:  # the broker does not answer: what was read is all there is to go by
                return
        self._read_answers(0)  # what is fetched already
        while (
            request not in self._answers
            and any(self._read_up_to[p] < end for p, end in ends.items())
            and time.monotonic() < give_up
        ):
            self._read_answers(0.1)

    def call(self, args: bytes, timeout_s: float = 30.0) -> bytes | None:
        """Send a request and wait for its answer."""
        return self.wait(self.send(args, timeout_s))

    def close(self) -> None:
        """Leave, deliver the requests still in flight (10 s at the most), and free the producer if it delivered
        them all (`release`). A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.consumer.close()
        self.producer.flush(10)
        release(self.producer, f"DRPC client of {self.chain.name}")


def call(config: ServiceConfig, chain: Chain, args: bytes, timeout_s: float = 30.0) -> bytes | None:
    """One request, one answer (`DrpcError` when it failed or timed out)."""
    client = DrpcClient(config, chain)
    try:
        return client.call(args, timeout_s)
    finally:
        client.close()
