"""When is a task of a coordinated step finished with a request (`acker.coordinated`)? Pure: no Kafka."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acker.coordinated import DEADLINE_MAX_S, FAILURE_GRACE_MS, WHY_MAX_BYTES, Report, RequestState, TaskState


def _open(task: TaskState, request: str, deadline_ms: int) -> RequestState:
    state = task.request(request, deadline_ms, now_ms=0)
    assert state is not None
    return state


def test_a_first_step_task_is_finished_once_the_request_message_is_processed() -> None:
    task = TaskState(first=True, tasks=3, next_tasks=2)
    state = _open(task, "r", 10_000)
    assert not task.finished(state)
    state.count_sent(1)
    state.count_sent(1)
    task.processed(state, ok=True)
    assert task.finished(state)
    # Only this task of the first step knows the request: the next step expects one report.
    assert task.reports(state) == [Report(0, 0, 1), Report(1, 2, 1)]
    assert task.requests == {"r": state} and state.done  # a done marker, until the deadline


def test_a_later_task_waits_for_every_report_and_every_announced_message() -> None:
    task = TaskState(first=False, tasks=2, next_tasks=1)
    state = _open(task, "r", 10_000)
    task.processed(state, ok=True)
    task.reported(state, count=1, reporters=3, failed=False, sender=0)
    assert not task.finished(state)  # 1 of 3 reports
    task.processed(state, ok=True)
    task.reported(state, count=1, reporters=3, failed=False, sender=2)
    task.reported(state, count=0, reporters=3, failed=False, sender=1)  # a sender that sent nothing still reports
    assert task.finished(state) and not state.failed
    assert task.reports(state) == [Report(0, 0, 2)]  # every task of this step reports to the next


def test_a_request_with_no_messages_here_finishes_on_its_reports() -> None:
    task = TaskState(first=False, tasks=4, next_tasks=2, after_first=True, upstream_tasks=4)
    state = _open(task, "r", 10_000)
    task.reported(state, count=0, reporters=1, failed=False, sender=3)  # the first step's one task: any partition
    assert task.finished(state) and not state.failed


def test_failures_finish_at_once_and_travel_downstream() -> None:
    task = TaskState(first=False, tasks=2, next_tasks=2)
    state = _open(task, "r", 10_000)
    task.reported(state, count=5, reporters=3, failed=True, sender=0)
    assert task.finished(state)
    assert all(r.failed for r in task.reports(state))
    first = TaskState(first=True, tasks=1, next_tasks=1)
    raised = _open(first, "q", 10_000)
    first.processed(raised, ok=False)  # the step's execute raised
    assert first.finished(raised) and raised.failed


def test_why_a_request_failed_travels_downstream_the_first_reason_standing() -> None:
    """A failed answer said only "failed in the chain": its reason was in one line of one step's log, held back
    with others of its kind."""
    first = TaskState(first=True, tasks=1, next_tasks=2, name="step 0 task 0")
    raised = _open(first, "q", 10_000)
    first.processed(raised, ok=False, why="step 0 task 0: execute: ValueError: no")
    first.processed(raised, ok=False, why="a later one")
    assert first.finished(raised)
    reports = first.reports(raised)
    assert [r.why for r in reports] == ["step 0 task 0: execute: ValueError: no"] * 2
    assert raised.why is None and "why" not in raised.to_json()  # the done marker keeps nothing of it
    later = TaskState(first=False, tasks=1, next_tasks=1, after_first=True, name="step 1 task 0")
    state = _open(later, "q", 10_000)
    later.reported(state, count=0, reporters=1, failed=True, sender=0, why=reports[0].why)
    assert state.why == "step 0 task 0: execute: ValueError: no"
    assert later.reports(state) == [Report(0, 0, 1, True, "step 0 task 0: execute: ValueError: no")]
    lost = _open(later, "r", 10_000)
    later.reported(lost, count=2, reporters=1, failed=False, sender=0)
    later.processed(lost, ok=True)
    assert later.finished(lost)
    assert lost.why == "step 1 task 0: 1 messages of the request processed, 2 announced (lost or duplicated)"
    later.reports(lost)
    late = _open(later, "s", 10_000)
    assert later.expired(10_000)[0] == [late]
    assert late.why == "step 1 task 0: its deadline passed before it finished here"
    unsaid = _open(later, "t", 10_000)
    later.reported(unsaid, count=0, reporters=1, failed=True, sender=0)  # from a step of an earlier version
    assert unsaid.why == "step 1 task 0: failed upstream (task 0 of the step before said so, not why)"
    assert len(str(_failed("x" * 10_000).why)) == 500  # cut as the reasons of fails are (`fail_reasons.cut`)
    # and to WHY_MAX_BYTES of UTF-8: it rides on reports and answers, whose size nothing else checks
    emoji = _failed("\N{GRINNING FACE}" * 600).why
    assert emoji is not None and len(emoji.encode()) <= WHY_MAX_BYTES and emoji.endswith("…")


def _failed(why: str) -> RequestState:
    state = RequestState("u", 5)
    state.fail(why)
    return state


def test_a_count_mismatch_fails_the_request_rather_than_answering_wrong() -> None:
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = _open(task, "r", 10_000)
    task.processed(state, ok=True)
    task.processed(state, ok=True)  # a message more than announced
    task.reported(state, count=1, reporters=1, failed=False, sender=0)
    assert task.finished(state) and state.failed


def test_requests_past_their_deadline_are_failed_never_kept() -> None:
    task = TaskState(first=False, tasks=1, next_tasks=1)
    _open(task, "old", 100)
    _open(task, "new", 10_000)
    late, forgotten = task.expired(now_ms=100)
    assert [s.request for s in late] == ["old"] and late[0].failed and task.finished(late[0]) and forgotten == []
    assert task.request("older", deadline_ms=50, now_ms=100) is None  # never seen, already late: not opened
    assert set(task.requests) == {"old", "new"}


def test_a_request_past_its_deadline_is_not_worked_on_before_it_is_failed() -> None:
    """A restarted task whose step raised on a request at every try (its answer too large to write, say) met the
    request's next message or report with the state it had restored, past the deadline, and ran the step again:
    the same failure, at every restart, until the partition was stuck for good. Late now: `expired` fails it."""
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = _open(task, "r", 1_000)
    assert task.request("r", 1_000, now_ms=999) is state
    assert task.request("r", 1_000, now_ms=1_000) is None
    assert task.request("r", 1_000, now_ms=1_000, failure=True) is None
    late, _ = task.expired(now_ms=1_000)
    assert late == [state] and state.failed


def test_a_finished_request_is_never_opened_or_finished_again() -> None:
    """A request failed here early gets more messages and reports from upstream tasks still working on it; they are
    late, not a new request (which would run the step again and answer twice)."""
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = _open(task, "r", 1_000)
    task.reported(state, count=3, reporters=2, failed=True, sender=0)
    assert task.finished(state)
    task.reports(state)
    assert task.request("r", 1_000, now_ms=10) is None
    assert task.request("r", 1_000, now_ms=1_500, failure=True) is None  # a failed report past the deadline too
    gone = 1_000 + FAILURE_GRACE_MS
    assert not task.has_expired(now_ms=gone - 1) and task.expired(now_ms=gone - 1) == ([], [])
    assert task.has_expired(now_ms=gone)
    late, forgotten = task.expired(now_ms=gone)  # finished already: forgotten after the grace, not failed again
    assert late == [] and forgotten == ["r"] and task.requests == {}
    assert task.request("r", 1_000, now_ms=gone, failure=True) is None  # and after it, its deadline says it is late


def test_a_request_id_used_again_after_its_marker_is_due_to_go_is_a_new_request() -> None:
    """A task restored after a stop holds done markers long past their time, and `expired` runs after the first
    records: the first message of a request that used the id again was taken for late, and no answer ever came."""
    task = TaskState(first=True, tasks=1, next_tasks=1)
    state = _open(task, "r", 1_000)
    task.processed(state, ok=True)
    task.reports(state)
    assert state.done and task.request("r", 1_000, now_ms=500) is None  # the same request: late
    again = task.request("r", 900_000, now_ms=1_000 + FAILURE_GRACE_MS)
    assert again is not None and not again.done and task.requests == {"r": again}
    assert task.expired(now_ms=1_000 + FAILURE_GRACE_MS) == ([], [])  # the new one is not forgotten in its place


def test_a_failure_found_at_the_deadline_still_reaches_the_end_of_the_chain() -> None:
    """The failed reports of a request failed at its deadline carry that deadline, past when they arrive: taken
    anyway (failed ones only) for FAILURE_GRACE_MS, so the last step answers "failed" instead of nothing."""
    task = TaskState(first=False, tasks=2, next_tasks=1)
    assert task.request("r", 1_000, now_ms=1_200) is None  # a message or an ok report: late
    state = task.request("r", 1_000, now_ms=1_200, failure=True)
    assert state is not None
    task.reported(state, count=0, reporters=2, failed=True, sender=1)
    assert task.finished(state) and state.failed
    task.reports(state)
    assert task.request("r", 1_000, now_ms=1_300, failure=True) is None  # the second upstream task's: once only


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=6), st.data())
def test_finished_exactly_when_every_report_and_message_is_in(counts: list[int], data: st.DataObject) -> None:
    """Senders interleaved in any order; each sender's messages come before its report (one partition, one
    producer). The task is finished after the last event, never before."""
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = _open(task, "r", 10**12)
    queues = [["message"] * n + ["report"] for n in counts]
    total = sum(len(q) for q in queues)
    for step in range(total):
        assert not task.finished(state)
        sender = data.draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        if queues[sender].pop(0) == "message":
            task.processed(state, ok=True)
        else:
            task.reported(state, count=counts[sender], reporters=len(counts), failed=False, sender=sender)
        assert task.finished(state) == (step == total - 1)
    assert not state.failed


def test_the_state_round_trips_through_json() -> None:
    state = RequestState("r", 5, 2, 3, 1, 4, False, {0: 2, 3: 1}, {"seen": ["a"]}, b"\x00\xff42", senders={0, 3})
    assert RequestState.from_json(state.to_json()) == state
    marker = RequestState("r", 5, failed=True, done=True)
    assert RequestState.from_json(marker.to_json()) == marker
    failing = RequestState("r", 5, failed=True, why="step 2 task 1: its deadline passed")  # saved failed, not done
    assert RequestState.from_json(failing.to_json()) == failing
    assert RequestState.from_json({**failing.to_json(), "why": 5}).why is None  # not text: said, never deciding
    older = {**state.to_json(), "answer": "42"}  # saved before answers were kept as bytes
    del older["answer64"]
    assert RequestState.from_json(older).answer == b"42"


def test_each_upstream_task_reports_once_and_upstream_tasks_that_disagree_on_their_count_fail_the_request() -> None:
    """A step whose processes read its partition count at different times (partitions added while one ran) reports
    two counts: finishing on either could answer before every message arrived. Counted once per sender, so a report
    repeated by one task does not stand for another's."""
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = _open(task, "r", 10**12)
    assert task.reported(state, count=0, reporters=2, failed=False, sender=0)
    assert not task.reported(state, count=0, reporters=2, failed=False, sender=0)  # the same task again: ignored
    assert not task.finished(state)
    disagreeing = _open(task, "q", 10**12)
    for sender, count in enumerate([2, 1, 5]):  # two tasks believe the step has 3 tasks, the third 4
        for _ in range(count):
            task.processed(disagreeing, ok=True)
        task.reported(disagreeing, count=count, reporters=3 if sender < 2 else 4, failed=False, sender=sender)
    assert disagreeing.failed and task.finished(disagreeing)
    outside = _open(task, "s", 10**12)
    task.reported(outside, count=0, reporters=2, failed=False, sender=5)  # a task the count does not have
    assert outside.failed


def test_a_done_marker_keeps_nothing_of_the_requests_work() -> None:
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = _open(task, "r", 10**12)
    state.answer, state.user = b"x" * 1000, {"k": 1}
    task.reported(state, count=0, reporters=1, failed=False, sender=0)
    assert task.finished(state)
    task.reports(state)
    marker = state.to_json()
    assert (marker["answer64"], marker["user"], marker["sent"]) == (None, {}, {})


def test_reports_agreeing_on_a_count_the_upstream_step_no_longer_has_fail_the_request() -> None:
    """Partitions added to the upstream step's topic: a process of it that has not seen them yet reports the old
    count (1 here), and the tasks of the new partitions, which may have messages of the request, report later. Taken
    alone, the one report finished the request without their share: an early answer."""
    task = TaskState(first=False, tasks=1, next_tasks=1, upstream_tasks=3)
    stale = _open(task, "r", 10**12)
    task.reported(stale, count=0, reporters=1, failed=False, sender=0)
    assert task.finished(stale) and stale.failed
    whole = _open(task, "q", 10**12)
    for sender in range(3):
        task.processed(whole, ok=True)
        task.reported(whole, count=1, reporters=3, failed=False, sender=sender)
    assert task.finished(whole) and not whole.failed


def test_behind_the_second_step_a_report_of_one_task_comes_from_task_0() -> None:
    """Only the first step's one report may name any task (whichever had the request)."""
    third = TaskState(first=False, tasks=2, next_tasks=1)
    state = _open(third, "r", 10**12)
    third.reported(state, count=0, reporters=1, failed=False, sender=3)
    assert state.failed


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.integers(0, 2), st.integers(0, 20_000)),  # a request id, its deadline
        st.tuples(st.just("finish"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("restore"), st.integers(0, 2), st.integers(0, 20_000)),  # as from the changelog
        st.tuples(st.just("drop"), st.integers(0, 2), st.just(0)),  # a tombstone in the changelog
        st.tuples(st.just("expire"), st.just(0), st.integers(0, 12_000)),  # time goes on by this much
        st.tuples(st.just("late"), st.just(0), st.integers(0, 12_000)),  # the same, its late requests left unfinished
    ),
    max_size=60,
)


@given(_STEPS)
def test_expiries_from_the_schedule_are_those_a_scan_of_every_request_finds(steps: list[tuple[str, int, int]]) -> None:
    """`expired` and `has_expired` take the requests due from a schedule (a heap) instead of scanning every request
    held at each poll: the same requests, whatever was opened, finished, restored or dropped meanwhile."""
    task = TaskState(first=True, tasks=1, next_tasks=1)
    now = 0

    def scanned() -> tuple[set[str], set[str]]:
        due = [(s, s.deadline_ms + (FAILURE_GRACE_MS if s.done else 0)) for s in task.requests.values()]
        return {s.request for s, at in due if at <= now and not s.done}, {
            s.request for s, at in due if at <= now and s.done
        }

    for kind, number, value in steps:
        request = f"r{number}"
        if kind == "open":
            task.request(request, now + value, now_ms=now)
        elif kind == "finish" and request in task.requests and not task.requests[request].done:
            task.reports(task.requests[request])
        elif kind == "restore":
            task.requests[request] = RequestState(request, now + value, done=value % 2 == 0)
        elif kind == "drop":
            task.requests.pop(request, None)
        elif kind in ("expire", "late"):
            now += value
            late, forgotten = scanned()
            assert task.has_expired(now) == bool(late or forgotten)
            found = task.expired(now)
            assert ({s.request for s in found[0]}, set(found[1])) == (late, forgotten)
            assert len(found[0]) == len(late) and len(found[1]) == len(forgotten)
            assert all(s.failed for s in found[0]) and not forgotten & set(task.requests)
            if kind == "expire":
                for state in found[0]:
                    task.reports(state)  # as the step finishes them


def test_a_task_restored_from_its_changelog_keeps_on_its_schedule_only_the_states_it_holds() -> None:
    """Each changelog record of a request put its state on the schedule, and a state a later record replaced (with
    its step's data and answer) was held there until its due time, up to a day."""
    task = TaskState(first=True, tasks=1, next_tasks=1)
    for received in range(3):  # three records of one request, as a changelog not yet compacted holds them
        task.requests["r"] = RequestState("r", 5_000, received=received, user={"big": "x" * 1000})
    task.reschedule()
    assert [entry[2] for entry in task._schedule_heap] == [task.requests["r"]]
    assert task.expired(5_000)[0] == [task.requests["r"]]


def test_a_request_whose_saved_state_cannot_be_read_fails_at_once_and_its_marker_outlives_any_deadline() -> None:
    """A changelog record that could not be read stopped the step; its request fails instead, finished at the next
    batch whatever its deadline (not known), and its done marker holds back what still comes for it for a day."""
    task = TaskState(first=False, tasks=1, next_tasks=1, name="step 1 task 0")
    task.requests["ok"] = RequestState("ok", 50_000)
    state = task.unreadable("r9", "its saved state could not be read (x)", 1_000)
    assert state.failed and state.why == "step 1 task 0: its saved state could not be read (x)"
    assert task.has_expired(1_000) and task.expired(1_000) == ([state], [])
    assert task.expired(1_001) == ([state], [])  # until it is finished
    [report] = task.reports(state)
    assert report.failed and report.why == "step 1 task 0: its saved state could not be read (x)"
    assert not task.has_expired(1_002) and task.expired(1_002) == ([], [])
    assert task.request("r9", 60_000, 2_000) is None  # a message still coming for it: late
    day_on = 1_000 + DEADLINE_MAX_S * 1000 + FAILURE_GRACE_MS
    assert task.request("r9", day_on + 60_000, day_on) is not None  # the marker forgotten: a new request
    replaced = task.unreadable("r8", "x", 1_000)
    task.requests["r8"] = RequestState("r8", 50_000)  # another state put for its key since
    assert task.expired(1_003) == ([], []) and not replaced.done
