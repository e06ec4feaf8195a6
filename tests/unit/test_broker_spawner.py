"""The local broker's spawner thread: children forked from a thread that lives as long as the process, whichever
thread starts them, and a forked child that starts one of its own."""

from __future__ import annotations

import os
import threading

from acker.kafka import local_broker


def _from_a_thread(value: int) -> int | None:
    """``value``, as `_forked_lastingly` hands it back to a worker thread, or None after 5 s."""
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(local_broker._forked_lastingly(lambda: value)), daemon=True)
    worker.start()
    worker.join(5)
    return got[0] if got else None


def test_a_child_forked_after_the_spawner_ran_spawns_with_a_spawner_of_its_own() -> None:
    """The spawner thread is not in a forked child: its first start from a worker thread waited for ever."""
    assert _from_a_thread(1) == 1  # the spawner runs now
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's outcome is its exit status)
        os._exit(0 if _from_a_thread(2) == 2 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's start never came back"
