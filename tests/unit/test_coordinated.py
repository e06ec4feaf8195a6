"""When is a task of a coordinated step finished with a request (`acker.coordinated`)? Pure: no Kafka."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acker.coordinated import Report, RequestState, TaskState


def test_a_first_step_task_is_finished_once_the_request_message_is_processed() -> None:
    task = TaskState(first=True, tasks=3, next_tasks=2)
    state = task.request("r", deadline_ms=10_000)
    assert not task.finished(state)
    state.count_sent(1)
    state.count_sent(1)
    task.processed(state, ok=True)
    assert task.finished(state)
    # Only this task of the first step knows the request: the next step expects one report.
    assert task.reports(state) == [Report(0, 0, 1), Report(1, 2, 1)]
    assert task.requests == {}


def test_a_later_task_waits_for_every_report_and_every_announced_message() -> None:
    task = TaskState(first=False, tasks=2, next_tasks=1)
    state = task.request("r", deadline_ms=10_000)
    task.processed(state, ok=True)
    task.reported(state, count=1, reporters=3, failed=False)
    assert not task.finished(state)  # 1 of 3 reports
    task.processed(state, ok=True)
    task.reported(state, count=1, reporters=3, failed=False)
    task.reported(state, count=0, reporters=3, failed=False)  # a sender that sent nothing still reports
    assert task.finished(state) and not state.failed
    assert task.reports(state) == [Report(0, 0, 2)]  # every task of this step reports to the next


def test_a_request_with_no_messages_here_finishes_on_its_reports() -> None:
    task = TaskState(first=False, tasks=4, next_tasks=2)
    state = task.request("r", deadline_ms=10_000)
    task.reported(state, count=0, reporters=1, failed=False)
    assert task.finished(state) and not state.failed


def test_failures_finish_at_once_and_travel_downstream() -> None:
    task = TaskState(first=False, tasks=2, next_tasks=2)
    state = task.request("r", deadline_ms=10_000)
    task.reported(state, count=5, reporters=3, failed=True)
    assert task.finished(state)
    assert all(r.failed for r in task.reports(state))
    first = TaskState(first=True, tasks=1, next_tasks=1)
    raised = first.request("q", deadline_ms=10_000)
    first.processed(raised, ok=False)  # the step's execute raised
    assert first.finished(raised) and raised.failed


def test_a_count_mismatch_fails_the_request_rather_than_answering_wrong() -> None:
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = task.request("r", deadline_ms=10_000)
    task.processed(state, ok=True)
    task.processed(state, ok=True)  # a message more than announced
    task.reported(state, count=1, reporters=1, failed=False)
    assert task.finished(state) and state.failed


def test_requests_past_their_deadline_are_failed_never_kept() -> None:
    task = TaskState(first=False, tasks=1, next_tasks=1)
    task.request("old", deadline_ms=100)
    task.request("new", deadline_ms=10_000)
    late = task.expired(now_ms=100)
    assert [s.request for s in late] == ["old"] and late[0].failed and task.finished(late[0])


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=6), st.data())
def test_finished_exactly_when_every_report_and_message_is_in(counts: list[int], data: st.DataObject) -> None:
    """Senders interleaved in any order; each sender's messages come before its report (one partition, one
    producer). The task is finished after the last event, never before."""
    task = TaskState(first=False, tasks=1, next_tasks=1)
    state = task.request("r", deadline_ms=10**12)
    queues = [["message"] * n + ["report"] for n in counts]
    total = sum(len(q) for q in queues)
    for step in range(total):
        assert not task.finished(state)
        sender = data.draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        if queues[sender].pop(0) == "message":
            task.processed(state, ok=True)
        else:
            task.reported(state, count=counts[sender], reporters=len(counts), failed=False)
        assert task.finished(state) == (step == total - 1)
    assert not state.failed


def test_the_state_round_trips_through_json() -> None:
    state = RequestState("r", 5, 2, 3, 1, 4, False, {0: 2, 3: 1}, {"seen": ["a"]}, "42")
    assert RequestState.from_json(state.to_json()) == state
