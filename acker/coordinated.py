"""Coordinated steps (Storm's CoordinatedBolt): per request, when has a task seen every message it will ever get?

A linear chain of steps; the tasks of a step are the partitions of its input topic. Every message carries the
request it belongs to. Per request, each task counts the messages it sends to each task (partition) of the next
step; when it is *finished* with the request it runs the step's ``finished`` callback (which may emit more: the
counts are taken after it) and then *reports* to every task of the next step: "request R: I sent you n messages"
(0 included), plus how many reports that task must expect in all.

When a task is finished (each upstream task's report counts once; reports that disagree on how many upstream
tasks there are fail the request):

- **first step**: once it has processed the request's message (its execute returned or raised). Only that one
  task of the first step knows the request, so it tells the next step to expect **1** report.
- **later steps**: once the expected number of reports has arrived and it has processed exactly as many messages
  of the request as they announced. Every task of a later step hears of the request (each gets a report), so each
  reports, and the next step expects as many reports as this step has tasks. Behind the second step, that number
  must also be the upstream step's partition count as the cluster gives it when the reports are read
  (``upstream_tasks``): a process of the upstream step that has not yet seen partitions added to its topic reports
  the old count, and finishing on it would leave out what the new partitions' tasks were sent.

A report travels on the same partition as the data it counts and after it, from the same transactional producer,
so when a report arrives the messages it counts have arrived before it; the count is then a check.

Failure: a message whose processing raises, a report saying the sender failed, or the request's deadline passing
make the task fail the request: it reports "failed" downstream at once (no callback), and the failure cascades to
the end of the chain, where the request is answered as failed. A request never hangs: every task that holds state
for it drops it at the deadline at the latest.

A failure found at the deadline travels in reports stamped with that deadline, past already when they arrive: a
task still takes a *failed* report for ``FAILURE_GRACE_MS`` after the deadline (and only a failed one), so that the
failure reaches the end of the chain and the client gets its ``failed`` answer rather than a timeout.

Invariant: a task finishes a request at most once. A request it has finished stays as a *done* marker until
``FAILURE_GRACE_MS`` after the request's deadline: messages and reports of it that come later (from upstream tasks
still working on a request that failed here) are late and ignored, instead of opening the request again, running
the step on it and answering it a second time. After that the marker goes, and the deadline in every message says
it is late.

Pure: no Kafka. `TaskState` returns what to send; the Kafka edge (`acker.kafka.coordinated_stage`) sends it, with
the step's outputs and its input offsets, in one transaction.
"""

from __future__ import annotations

import base64
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acker.fail_reasons import cut


@dataclass(frozen=True)
class Report:
    """To next-step task ``partition``: this task sent it ``count`` messages of the request; expect ``reporters``
    reports in all; ``failed`` when the request failed here or upstream."""

    partition: int
    count: int
    reporters: int
    failed: bool = False
    why: str | None = None  # of a failure: why the request failed, where it first did


@dataclass
class RequestState:
    """One request as one task sees it. ``user`` is the step's own per-request state (JSON-compatible), kept and
    restored with the rest, so that a restarted task goes on where the last one stopped."""

    request: str
    deadline_ms: int
    received: int = 0  # messages of the request processed here
    expected: int = 0  # messages the reports so far announced
    reports: int = 0  # from distinct senders
    reporters: int = -1  # reports to expect (-1: not known yet, no report arrived)
    failed: bool = False
    sent: dict[int, int] = field(default_factory=dict)  # next-step partition → messages sent there
    user: dict[str, Any] = field(default_factory=dict)
    answer: bytes | None = None  # the last step's result for the request
    done: bool = False  # finished here: kept only as a marker until the deadline
    senders: set[int] = field(default_factory=set)  # the upstream tasks whose report arrived
    # The next step's task count its keyed messages were routed by (0: none sent yet). Invariant: one count per
    # request, so that a key goes to one task: a process that took the task over with another count (partitions
    # added to the next step's topic) fails the request rather than send a key to a second task.
    routed: int = 0
    # Why the request failed, where it first failed ("step 2 task 1: ..."): passed down the chain with the failure, to
    # the client's error. The first reason stands. Invariant: a reason never changes what is decided.
    why: str | None = None

    def fail(self, why: str) -> None:
        """The request fails here, for ``why`` unless it failed for another reason before."""
        self.failed = True
        if self.why is None:
            self.why = short_why(why)

    def count_sent(self, partition: int) -> None:
        """The step emitted one message of the request to next-step task ``partition``."""
        self.sent[partition] = self.sent.get(partition, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "deadline_ms": self.deadline_ms,
            "received": self.received,
            "expected": self.expected,
            "reports": self.reports,
            "reporters": self.reporters,
            "failed": self.failed,
            "sent": {str(p): n for p, n in self.sent.items()},
            "user": self.user,
            "answer64": None if self.answer is None else base64.b64encode(self.answer).decode("ascii"),
            "done": self.done,
            "senders": sorted(self.senders),
            **({"routed": self.routed} if self.routed else {}),  # a done marker stays small
            **({"why": self.why} if self.why is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestState:
        return cls(
            data["request"],
            int(data["deadline_ms"]),
            int(data["received"]),
            int(data["expected"]),
            int(data["reports"]),
            int(data["reporters"]),
            bool(data["failed"]),
            {int(p): int(n) for p, n in data["sent"].items()},
            dict(data["user"]),
            _answer(data),
            bool(data.get("done", False)),
            {int(t) for t in data.get("senders", ())},  # none in states saved by earlier versions
            int(data.get("routed", 0)),  # nor this
            why if isinstance(why := data.get("why"), str) else None,  # nor this
        )


FAILURE_GRACE_MS = 10_000  # as long as a DRPC client waits after the deadline for the "failed" answer (5 s + 5 s)
# A request's deadline is at most this far from its sending (Storm bounds a request by the topology's message
# timeout): a task keeps a request's state, then its done marker, until the deadline, in memory and in its changelog.
DEADLINE_MAX_S = 24 * 3600
# A step takes deadlines up to this far past its own clock: the horizon, and clocks that differ between hosts.
DEADLINE_TAKEN_MS = (DEADLINE_MAX_S + 600) * 1000


class _Requests(dict[str, RequestState]):
    """A task's requests by id. Each state put here (opened, or restored from the changelog) is put on its task's
    schedule of expiries too (`TaskState._schedule`)."""

    def __init__(self, scheduled: Callable[[RequestState], None]) -> None:
        super().__init__()
        self._scheduled = scheduled

    def __setitem__(self, request: str, state: RequestState) -> None:
        super().__setitem__(request, state)
        self._scheduled(state)


def _due_ms(state: RequestState) -> int:
    """When ``state`` expires: its deadline, or a done marker's ``FAILURE_GRACE_MS`` later."""
    return state.deadline_ms + (FAILURE_GRACE_MS if state.done else 0)


class TaskState:
    """The requests one task (one partition of a step's input topic) is working on.

    ``first``: the task belongs to the first step; ``after_first``: to the second, whose one report per request
    comes from whichever task of the first step had the request. ``tasks``: how many tasks this step has (its
    partition count); ``next_tasks``: how many the next step has (1 for the step that joins the results).
    ``upstream_tasks``: behind the second step, the upstream step's partition count as the cluster last gave it (0:
    not known); the edge updates it before it hands over reports.
    """

    def __init__(
        self,
        *,
        first: bool,
        tasks: int,
        next_tasks: int,
        after_first: bool = False,
        upstream_tasks: int = 0,
        name: str = "this task",
    ) -> None:
        """``name``: the task's, as the reasons of the failures it decides start (``step 2 task 1``)."""
        self.first, self.tasks, self.next_tasks, self.name = first, tasks, next_tasks, name
        self.after_first, self.upstream_tasks = after_first, upstream_tasks
        # When requests expire, earliest first: (due, a tie-breaker, state). Invariant: every state in `requests`
        # has an entry with its due time (`_due_ms`; a state's deadline never changes, and it is scheduled again
        # when it becomes done); an entry whose state has left `requests`, or whose due time is no longer its
        # state's, is stale and dropped when it comes up. A step polls for expiries several times a second: it was
        # a scan of every request and done marker held (up to a day's, 60 ms at a million), at each poll and batch.
        self._schedule_heap: list[tuple[int, int, RequestState]] = []
        self._ties = itertools.count()
        self.requests: dict[str, RequestState] = _Requests(self._schedule)
        # Requests failed when restored (`unreadable`), to finish at once: `expired` returns them, whatever their
        # deadline, until they are done or replaced.
        self._failing: list[RequestState] = []

    def reschedule(self) -> None:
        """The schedule made again from the requests held, its stale entries gone: after a restore, which put the
        state of each changelog record on it, and a state a later record replaced stayed held until its due time."""
        self._schedule_heap = [(_due_ms(state), next(self._ties), state) for state in self.requests.values()]
        heapq.heapify(self._schedule_heap)

    def unreadable(self, request: str, why: str, written_ms: int) -> RequestState:
        """The request's state saved here at ``written_ms`` could not be read back (``why``): failed, as its answer
        could not be trusted, and to be finished at once (`expired` returns it), even if it was answered before (a
        done marker that cannot be read: answered ``failed`` once more, which a client, waiting for the first answer,
        never takes). Its deadline is not known: the longest a request may have from then, so that its done marker
        keeps most of what may still come for it from reopening it (a step takes deadlines up to 10 minutes past
        that, for clocks that differ)."""
        state = RequestState(request, written_ms + DEADLINE_MAX_S * 1000)
        state.fail(f"{self.name}: {why}")
        self.requests[request] = state
        self._failing.append(state)
        return state

    def _schedule(self, state: RequestState) -> None:
        heapq.heappush(self._schedule_heap, (_due_ms(state), next(self._ties), state))

    def _current(self, entry: tuple[int, int, RequestState]) -> bool:
        due, _, state = entry
        return self.requests.get(state.request) is state and _due_ms(state) == due

    def request(self, request: str, deadline_ms: int, now_ms: int, *, failure: bool = False) -> RequestState | None:
        """The request's state, opened by its first message or report; None when the message is late: the request
        is done here, or past its deadline already (``failure``: a failed report for a request never seen here,
        taken until ``FAILURE_GRACE_MS`` after the deadline). A request seen here and past its deadline is not
        worked on any more: `expired` fails it (a restarted task whose step raised on it at every try, say, or whose
        answer could not be written, gets past it that way). A done marker past its time to be forgotten is forgotten
        here already (restored after a stop, before `expired` ran): a request id used again since is a new request."""
        state = self.requests.get(request)
        if state is not None and state.done and state.deadline_ms + FAILURE_GRACE_MS <= now_ms:
            state = None
        if state is None:
            if deadline_ms + (FAILURE_GRACE_MS if failure else 0) <= now_ms:
                return None
            self.requests[request] = RequestState(request, deadline_ms)
            return self.requests[request]
        return None if state.done or state.deadline_ms <= now_ms else state

    def processed(self, state: RequestState, *, ok: bool, why: str | None = None) -> None:
        """A data message of the request was processed here (``ok``: the step's execute returned; else ``why``)."""
        state.received += 1
        if not ok:
            state.fail(why or f"{self.name}: a message of the request failed")

    def reported(
        self, state: RequestState, count: int, reporters: int, *, failed: bool, sender: int, why: str | None = None
    ) -> bool:
        """A report from upstream task ``sender``; False (and nothing changes) if that task reported already.

        The upstream tasks must agree on how many they are: reports that disagree (a step whose processes read its
        partition count at different times, partitions added meanwhile), or a sender outside the count, fail the
        request, since counting to either number could finish it before every message arrived. The first step's one
        report names its task, any of them: from there ``reporters`` is 1 whoever sends it. ``why``: a failed
        report's reason."""
        if sender in state.senders:
            return False
        counted = reporters == 1 if self.after_first else 0 <= sender < reporters
        if failed:
            state.fail(why or f"{self.name}: failed upstream (task {sender} of the step before said so, not why)")
        if state.reporters not in (-1, reporters):
            state.fail(f"{self.name}: the upstream tasks disagree on their number ({state.reporters} and {reporters}): "
                       "partitions added upstream")  # fmt: skip
        elif not counted:
            state.fail(f"{self.name}: a report from task {sender}, of {reporters} upstream tasks")
        state.senders.add(sender)
        state.reports += 1
        state.expected += count
        state.reporters = reporters
        return True

    def finished(self, state: RequestState) -> bool:
        """Whether the task has seen every message of the request it will ever get (or the request failed)."""
        if state.failed:
            return True
        if self.first:
            return state.received > 0
        if state.reporters < 0 or state.reports < state.reporters:
            return False
        if not self.after_first and self.upstream_tasks and state.reporters != self.upstream_tasks:
            # Every upstream task agreed on a count the cluster no longer has: partitions were added upstream, and
            # tasks of the new count may have messages of the request whose reports will never be waited for.
            state.fail(f"{self.name}: the reports count {state.reporters} upstream tasks, the step before has "
                       f"{self.upstream_tasks} now (partitions added)")  # fmt: skip
            return True
        # Every counted message arrived before its report (same partition, same producer): a difference means
        # messages were lost or duplicated, and the request's answer could not be trusted.
        if state.received != state.expected:
            state.fail(f"{self.name}: {state.received} messages of the request processed, {state.expected} announced "
                       "(lost or duplicated)")  # fmt: skip
        return True

    def reports(self, state: RequestState) -> list[Report]:
        """What to send downstream once finished (after the step's callback emitted what it had to); the request
        becomes a done marker. One report per next-step task, 0 included."""
        if state.done:
            raise ValueError(f"request {state.request} was finished here already")
        reporters = 1 if self.first else self.tasks
        why = state.why if state.failed else None
        reports = [Report(p, state.sent.get(p, 0), reporters, state.failed, why) for p in range(self.next_tasks)]
        state.done = True
        # The marker keeps nothing else of the request's work, which a done request takes no more of: small, whatever
        # came before (reports of crafted senders, up to the changelog's record limit, which fails the request).
        state.sent, state.user, state.answer, state.senders, state.why = {}, {}, None, set(), None
        self._schedule(state)  # due later now, a marker
        return reports

    def expired(self, now_ms: int) -> tuple[list[RequestState], list[str]]:
        """At ``now_ms``: (requests past their deadline, or failed as restored (`unreadable`), and not finished,
        marked failed: the caller finishes them;
        done markers ``FAILURE_GRACE_MS`` past the deadline, forgotten: the caller deletes them from the changelog)."""
        self._failing = [state for state in self._failing if self._unfinished(state)]
        late: dict[str, RequestState] = {state.request: state for state in self._failing}
        forgotten: list[str] = []
        heap = self._schedule_heap
        while heap and heap[0][0] <= now_ms:
            entry = heapq.heappop(heap)
            if not self._current(entry):
                continue
            state = entry[2]
            if state.done:
                del self.requests[state.request]
                forgotten.append(state.request)
            else:
                state.fail(f"{self.name}: its deadline passed before it finished here")
                late[state.request] = state
        for state in late.values():  # until the caller finishes them (done), they are late at every call
            self._schedule(state)
        return list(late.values()), forgotten

    def has_expired(self, now_ms: int) -> bool:
        """Whether `expired` has anything to return at ``now_ms``."""
        if any(self._unfinished(state) for state in self._failing):
            return True
        heap = self._schedule_heap
        while heap and not self._current(heap[0]):
            heapq.heappop(heap)
        return bool(heap) and heap[0][0] <= now_ms

    def _unfinished(self, state: RequestState) -> bool:
        return not state.done and self.requests.get(state.request) is state


# Why a request failed is kept to this many bytes of UTF-8 (`short_why`): it rides on reports and on a failed answer,
# records whose size nothing else checks (500 characters of emoji, escaped in a report's JSON, made it 6.8 KB).
WHY_MAX_BYTES = 512


def short_why(why: str) -> str:
    """``why`` as a request carries it: a reason (`acker.fail_reasons.cut`) of `WHY_MAX_BYTES` at most."""
    text = cut(why)
    data = text.encode()
    if len(data) <= WHY_MAX_BYTES:
        return text
    return data[: WHY_MAX_BYTES - 3].decode(errors="ignore") + "…"  # a character cut in two left out


def _answer(data: dict[str, Any]) -> bytes | None:
    """The answer of a saved state: exact bytes (base64), or the UTF-8 text earlier versions saved."""
    if data.get("answer64") is not None:
        return base64.b64decode(data["answer64"])
    return None if data.get("answer") is None else str(data["answer"]).encode()
