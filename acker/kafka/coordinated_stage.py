"""One step of a coordinated chain over Kafka (`acker.coordinated`): processes, counts, reports, exactly once.

A chain named N has steps 0..k−1; step i reads ``N.step<i>`` (its tasks are that topic's partitions), and the last
step, which joins the partial results, reads a one-partition topic and writes one answer per request to
``N.results`` (to its partition 0, should partitions be added to it). Records:

- data: any value and key, headers ``acker.request`` (the request id) and ``acker.request.deadline`` (epoch ms);
- report: an empty record with those headers and ``acker.request.report`` = JSON
  ``{"from": task, "count": n, "reporters": r, "failed": false}``, sent to every task of the next step; a failed
  one says why in ``"why"`` (where the request first failed, and how: `RequestState.why`);
- answer (on ``N.results``, key = request id): the last step's result, header ``acker.request.status`` = ``ok``
  or ``failed``, and a failed one's reason in ``acker.request.why``.

Emitting with a key sends to partition ``crc32(key) mod tasks`` of the next step (fields grouping), without one
round-robin per request (shuffle grouping). Reports and answers are never shown to user code.

Exactly once per step: each batch of input records is processed in one Kafka transaction that holds the step's
outputs, its reports, the new state of every request it touched (a compacted changelog topic ``N.step<i>.state``,
partitioned like the input: key = request id, value = the request's `RequestState` as JSON, its done marker once
finished, a tombstone once that is forgotten: `acker.coordinated`) and the input offsets. A process that dies
mid-batch leaves nothing visible; the partition's next owner reloads the changelog and goes on from the committed
offsets, so a task restarted mid-request changes nothing in the answer. Records without a request header are copied
to ``N.step<i>.dlq`` with the reason, in the same transaction, as are reports sent to the first step (none reports
there) and changelog records a task's restore cannot read (their request fails).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from acker.config import ServiceConfig
from acker.coordinated import DEADLINE_MAX_S, DEADLINE_TAKEN_MS, RequestState, TaskState, short_why
from acker.dlq import DLQ_KEPT_BYTES, cut_copy
from acker.errors import AckerError
from acker.fail_reasons import reason_of
from acker.headers import HeaderList, decimal, first, read_headers, record_size, text
from acker.kafka.acker_client import fitted_batch_size
from acker.kafka.client_log import (
    RepeatFilter,
    reason_kind,
    repeats_held_back,
    run_turns,
    serve_log_lines,
    template_kind,
)
from acker.kafka.clients import (
    COORDINATOR_MOVING,
    LOOKUP_ATTEMPTS,
    PRODUCER_MAX_BYTES,
    AsWritten,
    KafkaClientError,
    TopicSpec,
    after_failure,
    answering,
    committed_offsets,
    consume_available,
    create_topics,
    kafka_error,
    metadata_admin,
    produce,
    readable,
    smallest_max_bytes,
    timed_out,
    topic_partitions,
    written_at_ms,
)
from acker.kafka.held_reads import WatchedConsumer
from acker.retries import ACKER_DLQ_REASON

log = logging.getLogger("acker.coordinated")
# Lines said per record or per request, one of a kind every 30 s with the number held back (`RepeatFilter`): a
# producer pointed at a step's topic logged a line per record it dead-lettered, and a step failing every request a
# line per request. Dead letters are one kind per reason, the others one per line (whatever the request).
_dead_letter_log = logging.getLogger("acker.coordinated.dead_letters")
repeats_held_back(_dead_letter_log, RepeatFilter(kind=reason_kind))
_request_log = logging.getLogger("acker.coordinated.requests")
repeats_held_back(_request_log, RepeatFilter(kind=template_kind, min_level=logging.INFO))

REQUEST = "acker.request"
DEADLINE = "acker.request.deadline"
REPORT = "acker.request.report"
STATUS = "acker.request.status"
WHY = "acker.request.why"
_COUNT_CHECK_S = 5.0  # how often a process checks that its step's partition counts are those it started with
TRANSACTION_TIMEOUT_MS = 10_000  # a batch's transaction takes milliseconds; a dead process's is aborted after this
RECORD_MARGIN = 1024  # room for a record's framing and headers below a topic's max.message.bytes
ANSWER_STATE_MARGIN = 512  # a request's state without its answer: counts and ids, as JSON
_CUT_HEADER_BYTES = 64  # a header that says a cut value's or key's whole length, framed
METADATA_WAIT_S = 5.0  # after a lookup unanswered twice: whether any broker answers at all (`_brokers_silent`)
FENCING_BACKOFF_S = 5.0  # after the committed offsets could not be looked up, how long expiries wait to ask again
# librdkafka 2.16's refusals of an abort while the batch's commit, which timed out, is still in progress: it takes
# only a call of the commit again (`_CONFLICT`, "Conflicting commit_transaction API call is already in progress"), or
# says the transaction is committing (`_STATE`, "Operation not valid in state BeginCommit"). Neither is fatal.
_ABORT_REFUSED = frozenset({KafkaError._CONFLICT, KafkaError._STATE})
# A transaction's commit that fails retriably (a timeout, the coordinator moving) is tried again (librdkafka resumes
# the commit in progress), up to this many times; then the batch goes on with a new producer (`_renewable`).
COMMIT_ATTEMPTS = 3
# The broker's refusals of a batch's offsets because the group moved on while the batch ran (a rebalance completed in
# the background: with incremental rebalancing, one that leaves this process its partitions too): the batch is
# aborted and its tasks start again from their last commit, in the process (`CoordinatedStage._start_over`).
GROUP_MOVED = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.STALE_MEMBER_EPOCH, KafkaError.FENCED_MEMBER_EPOCH,
})  # fmt: skip
# A batch whose transaction librdkafka wants aborted (`_doomed`: a record the broker refused, a producer epoch to bump
# after a lost sequence), or whose transactional calls Kafka did not answer in time (`_unanswered`: a broker
# restarting), is aborted and its tasks start again from their last commit, as after `GROUP_MOVED`: the
# producer takes new transactions after the abort. Up to this many batches in a row; one more fails again for a
# cause that stays (a topic the process may not write to), and the process stops rather than loop on it.
ABORTABLE_START_OVERS = 5
# A transactional call of the producer (its timeout is `TXN_CALL_S`) that has not returned this much later is taken as
# wedged: librdkafka 2.16 can block in `send_offsets_to_transaction` for ever, past its timeout, after the group's
# coordinator went away (a broker restart: seen here, the broker back for minutes; librdkafka#5456, #5511, open). The
# call runs in a thread of its own (`_bounded`); a wedged one stops the step (`WedgedProducerError`), which its
# supervisor restarts, rather than leave it hanging, deaf to its stop, its tasks stalled for ever.
TXN_CALL_S = 30.0
WEDGED_AFTER_S = TXN_CALL_S + 15.0
# Bytes of a request id, at most: it is in every record of its request and keys its state. A longer one is
# dead-lettered: its done marker, which must be saved, could be too large for the changelog (the batch aborted at
# every restart), and its records' headers would eat the margin left for them.
REQUEST_ID_MAX = 1024
# The largest sender, count and reporters a report may say (a signed 64-bit integer, as a Java step's would be); one
# above is dead-lettered. Python reads integers of up to 4,300 digits: two such counts, each readable, summed in a
# request's state past what JSON writes, failed the batch's save, and the step stopped, again at every restart.
REPORT_MAX = 2**63 - 1


class CoordinationError(AckerError):
    """A chain's step cannot go on as things are: its topics are not as its steps need them (partition counts that
    differ, or changed under them), or a batch's transaction was aborted."""


class WedgedProducerError(CoordinationError):
    """A transactional call of the step's producer did not return (`WEDGED_AFTER_S`): the process must start again."""


@dataclass(frozen=True)
class Chain:
    name: str
    steps: int  # including the last one, which joins the results

    def topic(self, index: int) -> str:
        return f"{self.name}.step{index}"

    @property
    def results(self) -> str:
        return f"{self.name}.results"

    def topics(self, config: ServiceConfig, partitions: int) -> list[TopicSpec]:
        """Every topic of the chain: ``partitions`` per step, one for the joining step and for the answers."""
        specs = []
        for i in range(self.steps):
            n = 1 if i == self.steps - 1 else partitions
            specs += [TopicSpec(self.topic(i), n, config.replication_factor),
                      TopicSpec(f"{self.topic(i)}.state", n, config.replication_factor, CHANGELOG_CONFIG),
                      TopicSpec(f"{self.topic(i)}.dlq", 1, config.replication_factor)]  # fmt: skip
        return [*specs, TopicSpec(self.results, 1, config.replication_factor)]


# A changelog's settings: compacted, and in segments small enough to be compacted soon. A task's state is read whole
# from the changelog when its partition is assigned (`CoordinatedStage._restore`), and Kafka never compacts the
# segment still written to (by default until it holds 1 GiB or a week): the restore read every request of the last
# week, done markers and tombstones included, a minute or more per partition assigned. Tombstones are kept an hour
# after compaction, longer than a restore takes (a restore that read a request's state and missed its tombstone
# would keep a request that ended).
CHANGELOG_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60_000),
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": str(3_600_000),
}


@dataclass
class Request:
    """What a step's code sees of a request: its id, and its own per-request state (kept across restarts)."""

    id: str
    task: int
    state: dict[str, Any]


Emit = Callable[..., None]  # emit(value: bytes | None, key: bytes | None = None)


class Step(Protocol):
    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None: ...

    def finished(self, request: Request, emit: Emit) -> None: ...


class CoordinatedStage:
    """Runs step ``index`` of ``chain``: as many processes as you like, one consumer group per step."""

    def __init__(
        self,
        config: ServiceConfig,
        chain: Chain,
        index: int,
        step: Step,
        *,
        transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
    ) -> None:
        self.config, self.chain, self.index, self.step = config, chain, index, step
        self.input = chain.topic(index)
        self.last = index == chain.steps - 1
        self.output = chain.results if self.last else chain.topic(index + 1)
        self.changelog, self.dlq = f"{self.input}.state", f"{self.input}.dlq"
        # A batch is one transaction: it is cut at a third of the timeout, so that a slow step commits what it did
        # rather than being aborted (and fenced) at every restart on the same records.
        self.transaction_timeout_ms = transaction_timeout_ms
        self._batch_s = transaction_timeout_ms / 3000
        self._next_count_check = time.monotonic() + _COUNT_CHECK_S
        self.group = f"{chain.name}.step{index}"
        self.tasks: dict[int, TaskState] = {}
        self.counters: dict[str, int] = {
            "processed": 0, "finished": 0, "failed": 0, "dead_letters": 0, "late": 0,
            "assigned": 0, "started_over": 0,  # tasks restored when assigned; batches aborted and started again
            "producers_renewed": 0,  # producers replaced after an outage left them without transactions
        }  # fmt: skip
        self._touched: dict[tuple[int, str], RequestState | None] = {}
        # By task: the changelog records its restore could not read (`_restored`), with why, the last of their key:
        # copied to the dead-letter topic by the next batch, and those whose key names no live request deleted from
        # the changelog (a live request's own is replaced by its done marker). Set again by each restore of the task.
        self._unreadable: dict[int, list[tuple[Message, str, bool]]] = {}  # with whether it names a live request
        self._round_robin = 0
        # The batch's emit that the producer refused as its transaction had failed (`_doomed`): what the step's code
        # raises after it fails the batch, not the request, whatever it made of the error. Cleared at each batch.
        self._refused_emit: KafkaException | None = None
        # Cooperative rebalancing: a process joining or leaving the step moves only the partitions that change owner;
        # the others keep their tasks (in memory, as committed: every batch's transaction is committed before the
        # next consume, or its tasks start again from their last commit) instead of reading their changelogs again.
        # First: a login refused said as such within seconds, a cluster away within 10 s.
        answering(config.client(), self.input)
        self.consumer = WatchedConsumer(config.stream_consumer(**{
            "group.id": self.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "partition.assignment.strategy": "cooperative-sticky"}),
            config.open_transaction_warn_s)  # fmt: skip
        # Partition counts are asked through a handle of their own: asked through the consumer, a lookup waited behind
        # its fetch (a broker answers a connection's requests in turn), 0.47 s each, at every batch with reports.
        self._lookups = metadata_admin(config.client())
        self.tasks_count, self.next_count = self._counts()
        # Behind the second step: the upstream step's partition count, asked again for each batch with reports in it
        # (`_ask_upstream`). Known from the start: without it, reports agreeing on a stale count would finish a
        # request before the messages of the upstream step's new partitions arrived.
        self._upstream_tasks = self._partition_count(chain.topic(index - 1)) if index >= 2 else 0
        state_count = len(topic_partitions(self.consumer, self.changelog))
        problem = None
        if 0 in (self.tasks_count, self.next_count) or state_count != self.tasks_count:  # a task's state lives in
            problem = (  # the changelog partition of its number
                f"{self.input}, {self.output} and {self.changelog} must exist, the last with the first's partition "
                f"count: they have {self.tasks_count}, {self.next_count} and {state_count} (create_chain_topics)"
            )
        elif index >= 2 and self._upstream_tasks == 0:
            problem = f"{chain.topic(index - 1)}, the upstream step's topic, must exist"
        elif (joining := self._joining_count(self.tasks_count, self.next_count)) is not None:
            problem = joining
        if problem is not None:
            self.consumer.close()
            raise CoordinationError(problem)
        # One transactional producer per process; the consumer group's generation fences a zombie (KIP-447). With a
        # stable --instance-id, a restarted process also aborts its predecessor's open transaction at once; without
        # one, the broker aborts it after transaction.timeout.ms, and until then readers wait behind it.
        transactional_id = f"{self.group}-{config.instance_id or uuid.uuid4().hex}"
        # The broker refuses a whole transaction for one record (or record batch) over a topic's max.message.bytes,
        # again at every restart on the same input: records are held to what every topic written takes.
        self.max_record = self._max_record(self.output, self.changelog)
        self.max_dead_letter = self._max_record(self.dlq)  # a dead letter is cut to fit its own topic alone
        self._producer_config = config.producer(**{"transactional.id": transactional_id, "linger.ms": 5,
                                                   "transaction.timeout.ms": transaction_timeout_ms,
                                                   **fitted_batch_size(config.client(), self.output, self.changelog,
                                                                       self.dlq)})  # fmt: skip
        self.producer = Producer(self._producer_config)
        self._broken = False  # a batch's transaction was aborted: this object's state is the batch's, not committed
        self._wedged = False  # a transactional call never returned (`_bounded`): the producer takes no other call
        self._abortable_in_row = 0  # batches started over in a row for an abortable error (`ABORTABLE_START_OVERS`)
        self._fencing_retry_at = 0.0  # when `_owned_offsets` may ask for the committed offsets again
        self.producer.init_transactions(30)
        self.consumer.subscribe(
            [self.input], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # -- the loop ---------------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        try:
            run_turns(stop, lambda: self.poll(0.1), self._close_clients)
        finally:
            log.info("step %d stopped: %s", self.index, ", ".join(f"{n} {name}" for name, n in self.counters.items()))

    def _close_clients(self) -> None:
        self.consumer.close()
        if not self._wedged:
            self.producer.flush(10)

    def poll(self, timeout_s: float) -> int:
        """Read what is there and process it in one transaction, with the requests past their deadline.
        `CoordinationError` after a batch's transaction was aborted: the process must start again (its state, in
        memory, is the aborted batch's); but for a batch the group moved on under (`GROUP_MOVED`), whose transaction
        librdkafka wants aborted (`_doomed`) or Kafka did not answer in time (`_unanswered`), whose tasks start again
        from their last commit here. `WedgedProducerError` when a transactional call never returned."""
        if self._broken:
            raise CoordinationError(f"step {self.index}: a batch's transaction was aborted: restart the process")
        records = [r for r in consume_available(self.consumer, 500, timeout_s) if readable(r, log, "consumer")]
        headers = [read_headers(r) for r in records]  # once each (`read_headers`): None where they cannot be read
        if self.index >= 2 and any(_is_report(h) for h in headers):  # before the transaction: an answer may be slow
            self._ask_upstream()
        if time.monotonic() >= self._next_count_check:  # before the records: an assignment in that consume asks
            self._check_counts()
        now_ms = int(time.time() * 1000)
        unreadable = [p for p in self._unreadable if p in self.tasks]
        if not records and not unreadable and not any(task.has_expired(now_ms) for task in self.tasks.values()):
            return 0
        # A transaction of expired requests only sends offsets too (below): found before it begins, as a lookup may
        # have to ask the group's coordinator. Its first record, if this process owns its partition, gives one
        # (the first record is always processed); else none may be known, and nothing is committed unchecked.
        owned_first = bool(records) and (records[0].partition() or 0) in self.tasks
        fencing = [] if owned_first else self._owned_offsets()
        if not owned_first and not fencing:
            return 0  # nothing of this process's to process, and expiries wait for offsets to check them with
        started = time.monotonic()
        read = {record.partition() or 0 for record in records}
        changed = set(read)  # the tasks the batch may change (a superset)
        counted = dict(self.counters)  # as they were: a batch aborted and read again is counted once
        late_done: list[tuple[int, str]] = []  # the requests this batch failed past their deadline
        self._refused_emit = None
        self.producer.begin_transaction()
        try:
            for i, record in enumerate(records):
                if i and time.monotonic() - started > self._batch_s:  # the rest is read again for the next batch
                    self._rewind(records[i:])
                    records = records[:i]
                    break
                self._handle(record, headers[i], now_ms)
            for partition in unreadable:
                changed.add(partition)
                self._drop_unreadable(partition)
            # After the records: one of them may have finished a request that is also past its deadline.
            for partition, task in self.tasks.items():
                if task.has_expired(now_ms):
                    changed.add(partition)
                late, forgotten = task.expired(now_ms)
                for state in late:
                    # Past its deadline, or its saved state unreadable (`TaskState.unreadable`): why says which.
                    _request_log.warning("request %s failed: %s", state.request, state.why)
                    self._finish(partition, state)
                    late_done.append((partition, state.request))
                for request in forgotten:
                    self._touched[(partition, request)] = None
            self._save()
            # Offsets in every transaction, one of expired requests only too: sending them is where the broker checks
            # this process's group generation (KIP-447), so a zombie cannot commit answers for requests a new owner has.
            positions = self._positions(records) or fencing
            metadata = self.consumer.consumer_group_metadata()
            self._bounded("send_offsets_to_transaction", positions, metadata, TXN_CALL_S)
            self._commit_transaction()
        except BaseException as error:
            failure = error
        else:
            for partition in unreadable:
                self._unreadable.pop(partition, None)
            if records:  # not a transaction of expiries only, which may come between two failures of the same records
                self._abortable_in_row = 0
            return len(records)
        # Out of the except block (`acker.kafka.clients`): the abort, and the start over that goes on, ask Kafka.
        took_s = time.monotonic() - started
        return self._aborted(failure, changed, read, counted, took_s, sent=self._positions(records), late=late_done)

    def _aborted(
        self,
        failure: BaseException,
        changed: set[int],
        read: set[int],
        counted: dict[str, int],
        took_s: float,
        *,
        sent: list[TopicPartition],
        late: list[tuple[int, str]],
    ) -> int:
        """Abort the transaction of a batch that failed with ``failure``, which raises again, unless the group moved on
        or librdkafka wants the transaction aborted (`_doomed`) or Kafka did not answer in time (`_unanswered`: a
        broker restarting), up to `ABORTABLE_START_OVERS` batches in a row: then
        the tasks ``changed`` start again from their last commit, and the partitions ``read`` from their committed
        offsets (``counted``: the counters as they were before the batch; ``took_s``: how long its transaction was
        open; ``sent``: the offsets after its records, which its transaction commits; ``late``: the requests it failed
        past their deadline, by task)."""
        # Nothing of the batch is visible (but for a commit that reached the coordinator while Kafka did not answer,
        # which a new producer finds committed, `_renewable`); this process stops (but for the cases below, which
        # start over here), and the partitions' next owner (a restart, or another process of the step) reloads the
        # committed state and goes on from the committed offsets.
        self._broken = True
        if isinstance(failure, WedgedProducerError):  # a call is still in the producer: the process must end
            raise failure
        renewed = False
        try:
            self._bounded("abort_transaction", TXN_CALL_S)  # raises `WedgedProducerError` past its wait
        except KafkaException as error:  # e.g. a fatal producer error
            self._stop_if_fenced(failure)
            if not self._renewable(failure, error, took_s):  # the batch's failure says more
                log.warning("step %d: the aborted batch's transaction: %s (after %r)", self.index, error, failure)
                raise failure from None
            self._renew_producer(failure, error)  # which says so
            renewed = True
        else:
            self._may_start_over(failure, changed)
        with after_failure(failure):
            committed = self._start_over(changed, read)
        if renewed and self._committed_after_all(sent, committed, late):
            # Its commit had reached the coordinator: its records are not read again, and its counts stand.
            self.counters["started_over"] += 1
            log.warning("step %d: the batch's transaction was committed after all: its records are not read again",
                        self.index)  # fmt: skip
        else:  # as before the batch, which is read again, but for what the abort itself did
            self.counters.update(counted, started_over=counted["started_over"] + 1,
                                 producers_renewed=self.counters["producers_renewed"])  # fmt: skip
        self._broken = False
        return 0

    def _committed_after_all(
        self, sent: list[TopicPartition], committed: dict[int, int], late: list[tuple[int, str]]
    ) -> bool:
        """Whether the transaction of a batch whose commit was unanswered was committed all the same, as the start
        over (`_start_over`: ``committed``, the committed offsets of the partitions it read, and the tasks restored)
        finds it: a batch of records, when the offsets committed are those after its records (``sent``, above any
        committed before it); a batch of expiries only (no offsets of its own: it sent those committed already), when
        the requests it failed past their deadline (``late``) are done in the tasks as committed, as no batch before
        it had left them."""
        if sent:
            return all(committed.get(tp.partition) == tp.offset for tp in sent)
        return bool(late) and all(
            p in self.tasks and (state := self.tasks[p].requests.get(r)) is not None and state.done for p, r in late
        )

    def _stop_if_fenced(self, failure: BaseException) -> None:
        """Raise `KafkaClientError` saying so when ``failure`` is the step's consumer fenced out of its group by
        another with its static member id: the consumer takes nothing more (a start over failed to seek, "Erroneous
        state", which named no cause)."""
        cause = kafka_error(failure) if isinstance(failure, KafkaException) else None
        if cause is not None and cause.code() == KafkaError.FENCED_INSTANCE_ID:
            raise KafkaClientError(f"step {self.index}: the batch's offsets", cause, f" (another process of group "
                                   f"{self.group} took group.instance.id {self.config.static_member_id}: a second "
                                   "process given it, or this one's successor started while it hung; each process "
                                   "needs an id of its own)") from None  # fmt: skip

    def _may_start_over(self, failure: BaseException, changed: set[int]) -> None:
        """Raise ``failure``, whose batch's abort went through, unless its tasks may start again in the process: the
        group moved on, or librdkafka wants the transaction aborted or Kafka did not answer in time (up to
        `ABORTABLE_START_OVERS` batches in a row); `KafkaClientError` when the step was fenced (`_stop_if_fenced`)."""
        self._stop_if_fenced(failure)
        cause = kafka_error(failure) if isinstance(failure, KafkaException) else None
        if cause is not None and cause.code() in GROUP_MOVED:
            log.warning("step %d: the group moved on while a batch ran (%s): the batch is aborted, and its tasks %s "
                        "start again from their last commit", self.index, cause.str(), sorted(changed))  # fmt: skip
        elif (_doomed(failure) or _unanswered(failure)) and self._abortable_in_row < ABORTABLE_START_OVERS:
            self._abortable_in_row += 1
            log.warning("step %d: the batch's transaction cannot commit (%s): it is aborted, and its tasks %s start "
                        "again from their last commit (%d of %d batches in a row)", self.index, failure,
                        sorted(changed), self._abortable_in_row, ABORTABLE_START_OVERS)  # fmt: skip
        else:
            raise failure

    def _renewable(self, failure: BaseException, error: BaseException, took_s: float) -> bool:
        """Whether a batch that failed with ``failure`` after ``took_s``, whose abort failed with ``error``, goes on
        with a new producer (`_renew_producer`): the abort failed fatally (the producer takes nothing any more: fenced,
        as the broker fences it when it aborts a transaction past its timeout, in an outage), or was refused because
        the batch's commit, unanswered in all its attempts, is still in progress (`_ABORT_REFUSED`: librdkafka takes
        no other transactional call until that commit is answered, however long Kafka stays away), after Kafka
        did not answer in time, librdkafka wanted the transaction aborted, or the transaction outlived its timeout;
        up to `ABORTABLE_START_OVERS` batches in a row; and only with a transactional id of this process's own (no
        ``--instance-id``). With a stable one, the fencing may be a successor's (a process started in place of this
        one while it was cut off), which a new producer here would fence in turn: the process stops, as before. The
        new producer's `init_transactions` waits for the batch's transaction to end, committed (its commit had reached
        the coordinator) or aborted, and the start over reads what was committed: either way, the batch once."""
        cause = kafka_error(error) if isinstance(error, KafkaException) else None
        if cause is None or not (cause.fatal() or cause.code() in _ABORT_REFUSED) or self.config.instance_id:
            return False
        outlived = took_s * 1000 > self.transaction_timeout_ms
        return (_unanswered(failure) or _doomed(failure) or outlived) and self._abortable_in_row < ABORTABLE_START_OVERS

    def _renew_producer(self, failure: BaseException, error: BaseException) -> None:
        """Go on with a new producer of the same transactional id in place of one that took no more transactions
        after ``failure`` (its abort: ``error``), which is dropped (destroyed with whatever it had in flight). The new
        one's `init_transactions` ends whatever the old one left open (aborts it, or waits for a commit that reached
        the coordinator): as a restart of the process would, but for the consumer, which keeps its partitions. Raises
        what `init_transactions` raises (the process stops)."""
        self._abortable_in_row += 1
        cause = kafka_error(error) if isinstance(error, KafkaException) else None
        held = cause is not None and not cause.fatal()  # `_ABORT_REFUSED`
        log.warning("step %d: the batch failed (%s) and its producer takes %s (%s): a new one goes on, and the batch's "
                    "tasks start again from their last commit (%d of %d batches in a row)", self.index, failure,
                    "no abort while its commit is unanswered" if held else "no more transactions", error,
                    self._abortable_in_row, ABORTABLE_START_OVERS)  # fmt: skip
        self.producer.purge()  # nothing of a failed transaction is to be sent
        self.producer = Producer(self._producer_config)
        self._bounded("init_transactions", TXN_CALL_S)
        self.counters["producers_renewed"] += 1

    def _start_over(self, changed: set[int], read: set[int]) -> dict[int, int]:
        """After an aborted batch: the tasks it may have changed (``changed``) as last committed, and the consumer
        back to the committed offsets of those it read records of (``read``; the others' positions are their
        committed offsets already, and one just assigned may not be fetching yet: a seek there is refused), which are
        returned by partition. The other tasks are as committed: every batch before was; a task revoked is dropped by
        the next consume's callback. Raises what Kafka raises (the process stops, as after any other aborted batch)."""
        self._touched.clear()
        for partition in sorted(p for p in changed if p in self.tasks):
            self.tasks[partition] = self._restore(partition)
        owned = [TopicPartition(self.input, p) for p in sorted(read) if p in self.tasks]
        committed = {tp.partition: tp.offset for tp in (self._committed(owned, self.consumer) if owned else [])}
        for partition, offset in committed.items():
            self.consumer.seek(TopicPartition(self.input, partition, offset if offset >= 0 else OFFSET_BEGINNING))
        return committed

    def _committed(self, partitions: list[TopicPartition], consumer: Consumer | None = None) -> list[TopicPartition]:
        """The step's committed offsets of ``partitions``, stable (read_committed: a lookup waits for a transaction
        still committing them), asked of ``consumer``, then of a new consumer of the group that never joins it while
        Kafka answers that it may be asked again (`LOOKUP_ATTEMPTS` in all, 1 s apart) or, once, does not answer in
        time (30 s: a transaction that does not end, which asking again rarely mends). Seen after a broker's restart:
        ``NOT_COORDINATOR`` from the step's consumer and from a new one, the group's coordinator not loaded yet, and
        a new one answered 0.2 s later. Raises the last failure."""
        asked_after_timeout = False
        for attempt in range(1, LOOKUP_ATTEMPTS + 1):
            asking = consumer
            if asking is None:
                asking = Consumer(self.config.client(**{"group.id": self.group, "enable.auto.commit": False,
                                                        "isolation.level": "read_committed"}))  # fmt: skip
            try:
                return committed_offsets(asking, partitions, 30)
            except KafkaException as error:
                timeout = timed_out(error)
                timed_out_twice = timeout and asked_after_timeout
                unreachable = _brokers_silent(asking, self.input) if timed_out_twice else None
                if unreachable is not None:  # an outage, not a transaction: every broker away
                    log.error("step %d: the committed offsets of %s were not answered in 30 s, twice, nor a request "
                              "for metadata in %g s (%s): Kafka's brokers do not answer, and the step stops",
                              self.index, sorted(tp.partition for tp in partitions), METADATA_WAIT_S,
                              unreachable)  # fmt: skip
                elif timed_out_twice:  # Kafka answers a lookup of stable offsets only once no transaction commits
                    # them: one that does not end (a hanging one) holds them for good
                    log.error("step %d: the committed offsets of %s were not answered in 30 s, twice: a transaction "
                              "committing offsets of group %s that does not end may hold them (README, \"A "
                              "transaction that does not end\": kafka-transactions.sh find-hanging --topic "
                              "__consumer_offsets)", self.index, sorted(tp.partition for tp in partitions),
                              self.group)  # fmt: skip
                if not _unanswered(error) or attempt == LOOKUP_ATTEMPTS or timed_out_twice:
                    raise
                asked_after_timeout = asked_after_timeout or timeout
                log.warning("step %d: the committed offsets of %s (%s): asked again", self.index,
                            sorted(tp.partition for tp in partitions), error)  # fmt: skip
            finally:
                if asking is not consumer:
                    asking.close()
            consumer = None
            time.sleep(1.0)
        raise AssertionError("unreachable")  # every attempt returns or raises

    def _bounded(self, call: str, *args: Any) -> None:
        """``self.producer.<call>(*args)``, in a thread of its own, waited for `WEDGED_AFTER_S`: what it raises is
        raised here; `WedgedProducerError` if it has not returned by then (its thread is left in librdkafka, a
        daemon: the process can still end)."""
        outcome: list[BaseException | None] = []
        done = threading.Event()

        def run() -> None:
            try:
                getattr(self.producer, call)(*args)
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)
            finally:
                done.set()

        threading.Thread(target=run, name=f"step{self.index}-{call}", daemon=True).start()
        if not done.wait(WEDGED_AFTER_S):
            self._wedged = True
            raise WedgedProducerError(
                f"step {self.index}: the producer's {call} has not returned after {WEDGED_AFTER_S:.0f} s (its timeout "
                f"is {TXN_CALL_S:.0f} s): librdkafka is stuck, as it can be after the group's coordinator went away "
                "(a broker restart): restart the process, which goes on from the last commit"
            )
        if outcome[0] is not None:
            raise outcome[0]

    def _commit_transaction(self) -> None:
        """Commit the batch's transaction, again where the failure says it may be tried again."""
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                self._bounded("commit_transaction", TXN_CALL_S)
                return
            except KafkaException as error:
                code = kafka_error(error)
                if code is None or not code.retriable() or attempt == COMMIT_ATTEMPTS:
                    raise
                log.warning("step %d: committing the batch failed (%s): trying again", self.index, code)

    def _handle(self, record: Message, headers: HeaderList | None, now_ms: int) -> None:
        """Process ``record``, whose ``headers`` were read once (`read_headers`: None when they cannot be)."""
        partition = record.partition() or 0
        task = self.tasks.get(partition)
        if task is None:  # revoked while in flight
            return
        if headers is None:
            self._dead_letter(record, [], "unreadable headers", "a header name is not UTF-8")
            return
        request, deadline, report = text(headers, REQUEST), decimal(text(headers, DEADLINE)), text(headers, REPORT)
        if request is None or deadline is None:
            self._dead_letter(record, headers, "not a message of a request", f"no {REQUEST} and {DEADLINE} headers")
            return
        refused = _refused(headers, request, deadline, report, now_ms)
        if refused is not None:
            self._dead_letter(record, headers, *refused)
            return
        fields: _Report | None = None
        if report is not None and self.index == 0:  # no step reports to the first: another writer's record, which
            # would open a request that waits there for its deadline (up to a day), then fails it down the chain
            self._dead_letter(record, headers, "report at the first step", "the first step has no step before it")
            return
        if report is not None:
            try:
                fields = _Report.read(report)
            except (ValueError, KeyError, TypeError, RecursionError) as error:  # RecursionError: deep nesting
                self._dead_letter(record, headers, "unreadable report", str(error))
                return
        state = task.request(request, deadline, now_ms, failure=fields is not None and fields.failed)
        if state is None:  # of a request finished here already, or past its deadline: nothing to do
            self.counters["late"] += 1
            _request_log.info("request %s at task %d is finished here already, or past its deadline: dropped "
                              "(counted late)", request, partition)  # fmt: skip
            return
        if fields is not None:
            if not task.reported(state, fields.count, fields.reporters, failed=fields.failed, sender=fields.sender,
                                 why=fields.why):  # fmt: skip
                self.counters["late"] += 1  # a task's report once more (a zombie's, say): counted once
                return
        elif state.failed:  # failed here before it finished (its saved state unreadable): no work on it any more
            task.processed(state, ok=True)
        else:
            raised: str | None = None
            try:
                emit = self._emit(partition, state)
                self.step.execute(self._request(partition, state), record.value(), record.key(), emit)
            except Exception as error:
                self._raise_refused_emit(error)
                _request_log.warning("request %s failed at task %d: %r", request, partition, error)
                raised = reason_of(error, f"{task.name}: execute")
            task.processed(state, ok=raised is None, why=raised)
            self.counters["processed"] += 1
        self._touched[(partition, request)] = state
        if task.finished(state):
            self._finish(partition, state)

    def _finish(self, partition: int, state: RequestState) -> None:
        """The task is done with the request: the step's callback, then the reports (or, last, the answer). Its state
        is checked first as a save would check it: a request finished within the batch that began it is never saved,
        and one whose state cannot be was answered or failed by how the batches fell."""
        if not state.failed:
            try:
                self._saved(state)
            except _UNSAVED as error:
                self._fail_unsaved(partition, state, error)
        if not state.failed:
            try:
                self.step.finished(self._request(partition, state), self._emit(partition, state))
            except Exception as error:
                self._raise_refused_emit(error)
                _request_log.warning("finished(%s) failed at task %d: %r", state.request, partition, error)
                state.fail(reason_of(error, f"{self.tasks[partition].name}: finished"))
        headers = _request_headers(state)
        # Before `reports`, which leaves a marker without them.
        value, why = (None, state.why) if state.failed else (state.answer, None)
        reports = self.tasks[partition].reports(state)
        if self.last:  # the answer, once: ok with the step's result, or failed
            status = [
                *([(WHY, why.encode())] if why is not None else []),
                (STATUS, b"failed" if state.failed else b"ok"),
            ]
            # On partition 0, whatever the topic's count: a client assigns the partitions there are when it starts,
            # and answers spread by key over partitions added since were never read (every call timed out).
            produce(self.producer, self.output, value, key=state.request.encode(), partition=0,
                    headers=[*headers, *status])  # fmt: skip
        else:
            for report in reports:
                body = {"from": partition, "count": report.count, "reporters": report.reporters,
                        "failed": report.failed, **({"why": report.why} if report.why is not None else {})}  # fmt: skip
                # Its reason as UTF-8, not escaped: `WHY_MAX_BYTES` bounds the record.
                produce(self.producer, self.output, None, partition=report.partition,
                        headers=[*headers, (REPORT, json.dumps(body, ensure_ascii=False).encode())])  # fmt: skip
        self._touched[(partition, state.request)] = state  # now a done marker, until the deadline
        self.counters["failed" if state.failed else "finished"] += 1

    def _raise_refused_emit(self, error: Exception) -> None:
        """The step's code raised ``error``: if an emit of it was refused as the transaction had failed, the batch
        fails (with the refusal), not the request. Else the request fails: also for a Kafka error of the step's own
        clients, which this producer's transaction has nothing to do with."""
        if self._refused_emit is error:
            raise error
        if self._refused_emit is not None:
            raise self._refused_emit from error

    def _request(self, partition: int, state: RequestState) -> Request:
        return Request(state.request, partition, state.user)

    def _emit(self, task: int, state: RequestState) -> Emit:
        """The emit of the step's code at ``task``, for ``state``'s request."""
        headers = _request_headers(state)

        def emit(value: bytes | None, key: bytes | None = None) -> None:
            size = record_size(value, key, headers)
            if self.last:  # an answer is kept in the request's state too, in base64, until it is written
                size = 4 * -(-(len(value or b"") + len(key or b"")) // 3) + len(state.request) + ANSWER_STATE_MARGIN
            if size > self.max_record:  # raised in the step's code: the request fails, not the batch
                where = f"{self.changelog}, which keeps it until it is written," if self.last else self.output
                raise ValueError(f"a record of {size} bytes: {where} takes {self.max_record} at most")
            if self.last:  # the joining step's result: one answer per request, written once it is finished
                if value is not None and not isinstance(value, bytes):
                    raise TypeError(f"an answer is bytes or None, got {type(value).__name__}")
                state.answer = value
                return
            if key is not None:
                if state.routed not in (0, self.next_count):  # the request fails (`RequestState.routed`), also
                    said = f"its keys went to {state.routed} tasks of {self.output}, which has {self.next_count} now"
                    state.fail(f"{self.tasks[task].name}: {said}")  # for a step whose code goes on past the error
                    raise CoordinationError(f"request {state.request}: {said}")
                state.routed = self.next_count
                partition = zlib.crc32(key) % self.next_count
            else:
                partition, self._round_robin = self._round_robin % self.next_count, self._round_robin + 1
            try:
                produce(self.producer, self.output, value, key=key, partition=partition, headers=headers)
            except KafkaException as error:
                if _doomed(error):
                    self._refused_emit = error
                raise
            state.count_sent(partition)

        return emit

    def _dead_letter(self, record: Message, own: HeaderList, reason: str, detail: str) -> None:
        """Copy ``record`` (its ``own`` headers) to the step's dead-letter topic with ``reason: detail``, whole, or
        cut to fit (`max_dead_letter`): a copy the producer or the topic refused would abort the batch at every
        restart on it."""
        self.counters["dead_letters"] += 1
        _dead_letter_log.warning("dead-lettering %s[%s]@%s: %s: %s", record.topic(), record.partition(),
                                 record.offset(), reason, detail)  # fmt: skip
        origin = f"{record.topic()}/{record.partition()}/{record.offset()}"
        said: HeaderList = [(ACKER_DLQ_REASON, f"{reason}: {detail}".encode()), ("acker.dlq.origin", origin.encode())]
        value, key = record.value(), record.key()
        if record_size(value, key, [*said, *own]) > self.max_dead_letter:  # its own headers dropped, value and key cut
            room = self.max_dead_letter - record_size(None, None, said) - 2 * _CUT_HEADER_BYTES
            value, key, own = cut_copy(value, key, max(0, min(DLQ_KEPT_BYTES, room // 2)))
        produce(self.producer, self.dlq, value, key=key, headers=[*said, *own])

    # -- state ------------------------------------------------------------------------------------------------------

    def _save(self) -> None:
        for (partition, request), state in list(self._touched.items()):
            value = None if state is None else self._encode(partition, state)
            produce(self.producer, self.changelog, value, key=request.encode(), partition=partition)
        self._touched.clear()

    def _encode(self, partition: int, state: RequestState) -> bytes:
        """The request's changelog value. A step that put something JSON cannot hold into its request state fails
        that request (reported downstream as usual) rather than the whole batch, again at every restart."""
        try:
            return self._saved(state)
        except _UNSAVED as error:
            if state.done:  # a done marker holds nothing of the step's, nor its senders (`TaskState.reports`)
                raise
            self._fail_unsaved(partition, state, error)
            self._finish(partition, state)
            return json.dumps(state.to_json()).encode()

    def _saved(self, state: RequestState) -> bytes:
        """The request's changelog value; one of `_UNSAVED` when it cannot be saved, or would come back other."""
        saved = json.dumps(state.to_json()).encode()
        if not _same(json.loads(saved)["user"], state.user):  # a restart would hand the step other state
            raise ValueError("the step's state does not come back from JSON unchanged (JSON has strings for keys, "
                             "lists for tuples)")  # fmt: skip
        if len(saved) + len(state.request) > self.max_record:
            raise ValueError(f"{len(saved)} bytes of state: {self.changelog} takes {self.max_record} at most")
        return saved

    def _fail_unsaved(self, partition: int, state: RequestState, error: BaseException) -> None:
        _request_log.warning("request %s: its state cannot be saved (%r): failing it", state.request, error)
        state.fail(reason_of(error, f"{self.tasks[partition].name}: its state cannot be saved"))

    def _max_record(self, *topics: str) -> int:
        """The largest record this step writes to ``topics``, key, value and headers: below the producer's
        ``message.max.bytes`` and the topics' ``max.message.bytes`` (those it cannot look up are taken as the
        producer's)."""
        limit = int(self.config.client().get("message.max.bytes", PRODUCER_MAX_BYTES))
        smallest = smallest_max_bytes(self.config.client(), topics)
        return max(1, min(limit, smallest[1] if smallest else limit) - RECORD_MARGIN)

    def _joining_count(self, tasks: int, next_tasks: int) -> str | None:
        """What is wrong with the joining step's topic (it must have one partition, its one task joining every
        partial result), given this step's and the next step's partition counts, or None. Checked by the joining
        step and by the step before it, which would send a request's results to several tasks, each answering."""
        if self.last and tasks != 1:
            return f"{self.input}, the joining step's topic, has {tasks} partitions: it must have 1"
        if self.index == self.chain.steps - 2 and next_tasks != 1:
            return f"{self.output}, the joining step's topic, has {next_tasks} partitions: it must have 1"
        return None

    def _positions(self, records: list[Message]) -> list[TopicPartition]:
        last: dict[int, int] = {}
        for record in records:
            last[record.partition() or 0] = max(last.get(record.partition() or 0, -1), record.offset() or 0)
        return [TopicPartition(self.input, p, o + 1) for p, o in last.items() if p in self.tasks]

    def _owned_offsets(self) -> list[TopicPartition]:
        """Committed offsets of partitions this process owns, for a transaction without records (one is enough:
        the broker checks the group generation of the whole request): the positions known, which are the committed
        offsets here (every record delivered was committed with its batch, or rewound); else the group's committed
        offsets, asked. Empty for a group that never committed (no request state comes without committed offsets,
        so there is nothing to expire), or when they cannot be asked now (the coordinator moving): the expiries wait,
        and they are asked again after `FENCING_BACKOFF_S`."""
        owned = [TopicPartition(self.input, p) for p in self.tasks]
        if not owned:
            return []
        known = [tp for tp in self.consumer.position(owned) if tp.offset >= 0]
        if known:
            return known
        if time.monotonic() < self._fencing_retry_at:
            return []
        try:
            return [tp for tp in self.consumer.committed(owned, 10) if tp.offset >= 0]
        except KafkaException as error:  # the coordinator moving, say: expiries wait for a generation check
            self._fencing_retry_at = time.monotonic() + FENCING_BACKOFF_S
            log.warning("step %d: committed offsets not known (%s): expiries wait %.0f s for them", self.index,
                        error, FENCING_BACKOFF_S)  # fmt: skip
            return []

    def _counts(self) -> tuple[int, int]:
        """This step's task count (its input's partitions) and the next step's (1 for the joining step), as the
        cluster says now: 0 for a topic it does not have (or not yet: no leader). `KafkaException` if it does not
        answer."""
        return self._partition_count(self.input), 1 if self.last else self._partition_count(self.output)

    def _partition_count(self, topic: str) -> int:
        return len(topic_partitions(self._lookups, topic, 5.0))

    def _ask_upstream(self) -> None:
        """The upstream step's partition count as the cluster gives it now, for the reports of this batch
        (`TaskState.finished` fails a request whose reports agree on another). Asked after the reports were read: a
        report is written after every message it counts, each sent to a partition that existed then, so a partition
        that has a message of the request is known here. Once per batch; without an answer, the last count stands.
        Only up: partitions are never taken away, and a lower count is a broker's metadata not caught up yet (which
        would fail requests whose reports are right)."""
        try:
            count = self._partition_count(self.chain.topic(self.index - 1))
        except KafkaException as error:
            log.debug("step %d: could not ask the upstream step's partition count: %s", self.index, error)
            return
        if count > self._upstream_tasks:
            self._upstream_tasks = count
            for task in self.tasks.values():
                task.upstream_tasks = count

    def _check_counts(self) -> None:
        """`CoordinationError` when partitions were added to a step's topics since this process started: the counts
        it reports and routes with are no longer those of processes started since. It stops (a restart takes the
        new counts); reports that disagree meanwhile fail their requests downstream (`TaskState.reported`) rather
        than answer early. Asked at each assignment and every `_COUNT_CHECK_S` (a rebalance may come minutes
        later, when the group's leader refreshes its metadata)."""
        self._next_count_check = time.monotonic() + _COUNT_CHECK_S
        serve_log_lines(self._lookups)  # polled by nothing else
        try:
            now = self._counts()
        except KafkaException as error:  # no answer now: asked again at the next check
            log.debug("step %d: could not check its partition counts: %s", self.index, error)
            return
        if 0 not in now and now != (self.tasks_count, self.next_count):  # 0: a topic without leaders for a moment
            if (joining := self._joining_count(*now)) is not None:
                raise CoordinationError(f"step {self.index}: {joining}")
            raise CoordinationError(
                f"step {self.index}: the partition counts of {self.input} or {self.output} changed since this process "
                f"started ({self.tasks_count}, {self.next_count} then; {now} now): restart it"
            )

    def _rewind(self, unprocessed: list[Message]) -> None:
        """Read these records again: each partition's consumer position goes back to the first of them."""
        first: dict[int, int] = {}
        for record in unprocessed:
            partition = record.partition() or 0
            first[partition] = min(first.get(partition, record.offset() or 0), record.offset() or 0)
        for partition, offset in first.items():
            if partition in self.tasks:
                self.consumer.seek(TopicPartition(self.input, partition, offset))

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The counts are checked after the consume() that runs this, before its records: not on the consumer
        # inside its own callback, which clears the state of that consume() (confluent-kafka 2.16), and a log line
        # of librdkafka served later in it then aborts the process.
        self._next_count_check = 0.0
        for tp in partitions:
            self.tasks[tp.partition] = self._restore(tp.partition)
            self.counters["assigned"] += 1
        if partitions:  # a cooperative rebalance may give nothing: "tasks []" read as none held
            log.info("step %d: tasks %s assigned, %s held now", self.index, sorted(tp.partition for tp in partitions),
                     sorted(self.tasks))  # fmt: skip

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._drop(partitions)
        if partitions:
            log.info("step %d: tasks %s revoked, %s held now", self.index, sorted(tp.partition for tp in partitions),
                     sorted(self.tasks))  # fmt: skip

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Taken for dead (its session timed out, or it polled too late): another process may own the tasks now, and
        the group's generation fences this one's commits of them (KIP-447); a task coming back is read back from its
        changelog."""
        if partitions:
            tasks = sorted(tp.partition for tp in partitions)
            log.warning("step %d: tasks %s lost (taken for dead)", self.index, tasks)
        self._drop(partitions)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.tasks.pop(tp.partition, None)
            self._unreadable.pop(tp.partition, None)

    def _drop_unreadable(self, partition: int) -> None:
        """Within a batch: the task's changelog records its restore could not read, copied to the dead-letter topic;
        each whose key names no live request deleted from the changelog, as no done marker replaces it."""
        for record, why, live in self._unreadable[partition]:
            self._dead_letter(record, read_headers(record) or [], "unreadable state", why)
            if not live:
                produce(self.producer, self.changelog, None, key=record.key(), partition=partition)

    def _restore(self, partition: int) -> TaskState:
        """The task's requests as last committed: the changelog partition read to its end, once the committed input
        offset is stable. A previous owner's transaction may still be committing (a zombie whose offsets were taken
        before the group moved on): the consumer would start after its batch, and the state must hold that batch's
        changes. A read_committed consumer's offset lookup waits for it (KIP-447); its changelog records were
        written before its commit began, so they are below the log's end then, and a read_committed read up to
        that end waits for the transaction's marker (the read_committed end, the last stable offset, may not have
        reached them yet)."""
        task = TaskState(first=self.index == 0, tasks=self.tasks_count, next_tasks=self.next_count,
                         name=f"step {self.index} task {partition}",
                         after_first=self.index == 1, upstream_tasks=self._upstream_tasks)  # fmt: skip
        self._committed([TopicPartition(self.input, partition)])  # stable: waits for a transaction committing it
        unreadable: dict[bytes, tuple[Message, str]] = {}  # by key: the last record of a key, when unreadable
        with AsWritten(self.config.client(), self.group) as reading:
            low, high = reading.bounds(TopicPartition(self.changelog, partition))
            for record in reading.read(TopicPartition(self.changelog, partition, low), high):
                unreadable.pop(record.key() or b"", None)
                if record.value() is None and not _utf8(record.key()):  # deletes a record that named no request
                    continue
                try:
                    key, state = _restored(record)
                except _UnreadableStateError as error:
                    unreadable[record.key() or b""] = (record, str(error))
                    continue
                if state is None:
                    task.requests.pop(key, None)
                else:
                    task.requests[key] = state
        task.reschedule()
        now_ms = int(time.time() * 1000)
        kept: list[tuple[Message, str, bool]] = []
        for raw, (record, why) in unreadable.items():  # said when the next batch dead-letters them
            stamp = written_at_ms(record)  # now when it has none, or one ahead of now
            written_ms = now_ms if stamp is None else min(stamp, now_ms)
            # A request's only if its key can be one, and it may still be live: a record over a day old is past any
            # request's deadline (and a done marker's end: nothing can come for it any more).
            live = _utf8(raw) and len(raw) <= REQUEST_ID_MAX and written_ms + DEADLINE_MAX_S * 1000 > now_ms
            if live:
                where = f"{self.changelog}[{partition}] offset {record.offset()}"
                task.unreadable(raw.decode(), f"its saved state could not be read ({where}: {why})", written_ms)
            kept.append((record, why, live))
        if kept:
            self._unreadable[partition] = kept
        else:
            self._unreadable.pop(partition, None)
        return task


class _UnreadableStateError(ValueError):
    """A changelog record that is not a request's state."""


def _restored(record: Message) -> tuple[str, RequestState | None]:
    """A request's key and state as a changelog record holds them (None: a tombstone, the request is done);
    `_UnreadableStateError` when they cannot be read (a key not UTF-8, a value not the step's JSON or out of range:
    a record another producer wrote there, or a step of another version). The task goes on without it, never with a
    state it could not read: the record's request, if its key names one, fails (its answer could not be trusted,
    `TaskState.unreadable`), and the record is copied to the step's dead-letter topic (`_drop_unreadable`)."""
    try:
        key, value = (record.key() or b"").decode(), record.value()
        return key, None if value is None else RequestState.from_json(json.loads(value))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as error:
        raise _UnreadableStateError(f"{type(error).__name__}: {short_why(str(error))}") from None


def _doomed(error: BaseException) -> bool:
    """Whether ``error`` says the batch's transaction cannot commit and must be aborted: an abortable error (a
    commit's, or an offsets' send), or a record refused with ``_STATE``, as librdkafka refuses every record once the
    transaction has failed (a record the broker refused before it, say). Not a fatal error: the producer is done."""
    cause = kafka_error(error) if isinstance(error, KafkaException) else None
    return cause is not None and not cause.fatal() and (cause.txn_requires_abort() or cause.code() == KafkaError._STATE)


def _brokers_silent(consumer: Consumer, topic: str) -> str | None:
    """Why Kafka's brokers do not answer ``consumer`` (a request for ``topic``'s metadata, `METADATA_WAIT_S`), or None
    when they do (any broker answers one, whatever transaction holds the group's offsets).
    A lookup of committed offsets that timed out twice blamed a transaction that does not end, seen while every
    broker was down for minutes (librdkafka logging "Connection refused")."""
    try:
        consumer.list_topics(topic, timeout=METADATA_WAIT_S)
    except KafkaException as error:
        cause = kafka_error(error)
        return cause.str() if cause is not None else str(error)
    return None


def _unanswered(error: BaseException) -> bool:
    """Whether ``error`` is Kafka not answering a transactional call in time, or answering that it may be tried again
    (a broker restarting, a coordinator moving: `COORDINATOR_MOVING` whatever the error says), and not a fatal error.
    The batch is aborted and read again, whether or not a commit that timed out went through: its tasks start again
    from what was committed."""
    cause = kafka_error(error) if isinstance(error, KafkaException) else None
    if cause is None or cause.fatal():
        return False
    return cause.retriable() or cause.code() == KafkaError._TIMED_OUT or cause.code() in COORDINATOR_MOVING


@dataclass(frozen=True)
class _Report:
    """A report's fields (the module docstring)."""

    sender: int
    count: int
    reporters: int
    failed: bool
    why: str | None

    @classmethod
    def read(cls, report: str) -> _Report:
        """The report's fields; `ValueError`, `KeyError`, `TypeError` or `RecursionError` when they cannot be read."""
        fields = json.loads(report)
        count, reporters, failed, sender = fields["count"], fields["reporters"], fields["failed"], fields["from"]
        # Exactly as written (`reports`): "false" is not False, nor 1.9 a count.
        if any(type(n) is not int for n in (count, reporters, sender)) or type(failed) is not bool:
            types = [type(v).__name__ for v in (sender, count, reporters, failed)]
            raise TypeError(f"from, count, reporters, failed of types {types}")
        if count < 0 or reporters < 0 or sender < 0:
            raise ValueError(f"negative from, count or reporters: {sender}, {count}, {reporters}")
        if max(count, reporters, sender) > REPORT_MAX:
            raise ValueError(f"from, count or reporters above {REPORT_MAX}: {sender}, {count}, {reporters}")
        # Said, never deciding (`RequestState.why`): one that is not text is left out, not refused.
        why = short_why(raw) if failed and isinstance(raw := fields.get("why"), str) else None
        return cls(sender, count, reporters, failed, why)


# What a request state that cannot be saved raises (`CoordinatedStage._saved`): nested too deep for JSON, too.
_UNSAVED = (TypeError, ValueError, RecursionError)


def _refused(
    headers: HeaderList, request: str, deadline: int, report: str | None, now_ms: int
) -> tuple[str, str] | None:
    """Why a message of a request is dead-lettered (reason, detail), None when it is taken."""
    if deadline > now_ms + DEADLINE_TAKEN_MS:  # its state would be kept until then
        return "deadline too far", f"{(deadline - now_ms) / 1000:.0f} s from now, {DEADLINE_MAX_S} s at most"
    if len(request.encode()) > REQUEST_ID_MAX:
        return f"{REQUEST} too long", f"{len(request.encode())} bytes, {REQUEST_ID_MAX} at most"
    if "\ufffd" in request and not _utf8(first(headers, REQUEST)):  # read as text, two ids would be one
        return f"{REQUEST} not UTF-8", "a request id is text"
    if report is None and _is_report(headers):  # else user code would see it as data
        return "unreadable report", f"{REPORT} without a value"
    return None


def _same(restored: Any, kept: Any) -> bool:
    """Whether a step's state ``kept`` came back from JSON as ``restored``: ``==``, but for a NaN, which JSON keeps
    and which is never equal to itself (the mean of nothing failed its request)."""
    if isinstance(restored, float) and isinstance(kept, float) and math.isnan(restored) and math.isnan(kept):
        return True
    if isinstance(restored, dict) and isinstance(kept, dict):
        return restored.keys() == kept.keys() and all(_same(restored[k], kept[k]) for k in restored)
    if isinstance(restored, list) and isinstance(kept, list):
        return len(restored) == len(kept) and all(map(_same, restored, kept))
    return bool(restored == kept)


def _utf8(value: bytes | str | None) -> bool:
    """Whether a header value or a key is text as it is: `text` reads bytes that are not UTF-8 with replacement
    characters."""
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _is_report(headers: HeaderList | None) -> bool:
    """Whether a record of these headers is a report; not one when they cannot be read (None: `read_headers`), which
    `CoordinatedStage._handle` dead-letters."""
    return headers is not None and any(name == REPORT for name, _ in headers)


def _request_headers(state: RequestState) -> HeaderList:
    return [(REQUEST, state.request.encode()), (DEADLINE, str(state.deadline_ms).encode())]


def create_chain_topics(config: ServiceConfig, chain: Chain, partitions: int) -> None:
    create_topics(config.client(), chain.topics(config, partitions))
