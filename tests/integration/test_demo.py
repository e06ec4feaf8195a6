"""`acker demo`, small: the whole system under failures on the real broker and local Spark, and its report."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from acker.kafka.clients import delete_groups, delete_topics, named_under


def _demo(bootstrap: str, output: Path, *args: str) -> subprocess.Popen[bytes]:
    """The demo as its own process, its output to a file (a pipe nobody reads would block it)."""
    command = [sys.executable, "-m", "acker.cli", "demo", "--bootstrap-servers", bootstrap, *args]
    with output.open("wb") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def _ended(demo: subprocess.Popen[bytes], output: Path, timeout_s: float = 600) -> int:
    """The demo's exit status, once it ends. One still running after ``timeout_s`` is stopped as Ctrl-C stops it
    (its stages, broker and Spark with it; killed if that takes over 2 minutes) and the test fails with its output:
    left running, it took the machine's CPU from every later test (on a loaded CI machine it ran on for 20 minutes)."""
    try:
        return demo.wait(timeout_s)
    except subprocess.TimeoutExpired:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
        raise AssertionError(
            f"the demo had not ended {timeout_s:.0f} s on: stopped\n" + output.read_text(errors="replace")[-3000:]
        ) from None


def _survivors(prefix: str) -> list[str]:
    """Processes still running whose command line names this run's topics."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if prefix in args:
            found.append(f"{cmdline.parent.name}: {args[:200]}")
    return found


def test_the_demo_keeps_the_promise_under_failures_and_reports_it(bootstrap: str, tmp_path: Path) -> None:
    report_path, output = tmp_path / "report.json", tmp_path / "demo.out"
    demo = _demo(
        bootstrap, output, "--sentences", "400", "--rate", "100", "--timeout-s", "4", "--report", str(report_path)
    )
    assert _ended(demo, output) == 0, output.read_text(errors="replace")[-3000:]
    report = json.loads(report_path.read_text())
    assert report["failures"] == [] and report["lost"] == [] and report["committed_early"] == []
    assert report["source_records"] == 400
    assert sorted(report["dead_lettered"]) == sorted(report["poison"]) and len(report["poison"]) == 3
    assert all(mark == end for mark, end in report["watermarks"].values())
    assert report["acked_first_time"] + report["acked_after_replay"] + len(report["poison"]) == 400
    assert report["replays"] > 0 and report["nacks"]["FAILED"] > 0 and report["words_lost"] == 0
    # The poison records' dead letters say why (`acker.replay.detail`), where their last nack was a FAILED (not a
    # TIMEOUT of a crashed bolt's input): the split bolt and its exception.
    details = report["dead_letter_details"]
    assert details and set(details) <= set(report["poison"])
    assert all(re.fullmatch(r"bolt .*-split: InjectedFailureError: injected failure", d) for d in details.values())
    events = "\n".join(report["events"])
    assert "crashed (as injected): restarting it" in events and "restarted acker-0" in events
    assert _survivors(report["prefix"]) == []
    workdir = Path(".cache/demo", report["prefix"])
    split_logs = "".join(log.read_text(errors="replace") for log in workdir.glob("split-*.log"))  # kept, each stage's
    assert "InjectedFailureError('injected failure')" in split_logs  # the bolts' failures, said there with a traceback
    spark_log = (workdir / "spark.log").read_text(errors="replace")
    assert ":: resolving dependencies" in spark_log  # Ivy's report of the connectors went to the demo's Spark log,
    assert ":: resolving dependencies" not in output.read_text(errors="replace")  # not through its live table
    # Every topic made before it is used: the Spark jobs' dead-letter topic of malformed outcome records was not (a
    # warning on a broker that creates topics on first use; on one that does not, a malformed record stopped a job).
    assert "UNKNOWN_TOPIC_OR_PART" not in output.read_text(errors="replace")
    # On a cluster it was given, it leaves nothing of its own behind: its topics and consumer groups are deleted.
    assert named_under({"bootstrap.servers": bootstrap}, report["prefix"]) == ([], [])
    assert re.search(r"deleted this run's \d+ topics and \d+ consumer groups", output.read_text(errors="replace"))


def test_the_demo_under_chaos_and_a_broker_crash_still_keeps_the_promise(tmp_path: Path) -> None:
    """``--chaos``: stage processes picked at random (acker instances, the spout, the bolts) killed with SIGKILL while
    the sentences are written, and restarted; ``--kill-broker``: the demo's own broker too, started again on its data.
    Nothing lost, nothing committed early, every watermark at its end."""
    report_path, output = tmp_path / "report.json", tmp_path / "demo.out"
    command = [sys.executable, "-m", "acker.cli", "demo", "--sentences", "1500", "--rate", "100", "--timeout-s", "4",
               "--chaos", "4", "--kill-broker", "--seed", "7", "--report", str(report_path)]  # fmt: skip
    with output.open("wb") as sink:
        demo = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)  # on a local broker of its own
    assert _ended(demo, output) == 0, output.read_text(errors="replace")[-3000:]
    report = json.loads(report_path.read_text())
    assert report["failures"] == [] and report["lost"] == [] and report["committed_early"] == []
    assert report["source_records"] == 1500 and report["words_lost"] == 0
    assert all(mark == end for mark, end in report["watermarks"].values())
    events = report["events"]
    kills = [e for e in events if "with SIGKILL" in e]
    skipped = [e for e in events if "no SIGKILL" in e]
    assert len(kills) + len(skipped) == 6 and len(kills) >= 4, events  # acker-0's, the broker's, 4 at random
    assert any("killed broker with SIGKILL" in e for e in kills), events
    restarted = [e for e in events if e.split(maxsplit=1)[1].startswith("restarted ")]
    assert any("restarted broker" in e for e in restarted), events
    assert len(restarted) >= len(kills) - 1, events  # the last one killed may be down at the end
    assert _survivors(report["prefix"]) == []


def test_an_interrupted_demo_stops_everything_it_started(bootstrap: str, tmp_path: Path) -> None:
    output = tmp_path / "demo.out"
    demo = _demo(bootstrap, output, "--sentences", "100000", "--rate", "200")
    deadline = time.monotonic() + 120
    while not (found := re.search(r"named (demo-[0-9a-f]+)\*", output.read_text(errors="replace"))):
        assert time.monotonic() < deadline and demo.poll() is None, "the demo did not start"
        time.sleep(0.2)
    prefix = found.group(1)
    while len(_survivors(prefix)) < 4:  # its stages are up
        assert time.monotonic() < deadline, "the demo did not start its stages"
        time.sleep(0.5)
    # Its Spark JVM, named under the run's prefix: the Spark JVMs of the machine, counted before and after, took
    # another test's starting meanwhile for one the demo left.
    while not _survivors(f"spark.app.name=acker-{prefix}"):
        assert time.monotonic() < deadline, "the demo did not start Spark"
        time.sleep(0.2)
    time.sleep(1)  # while its Spark is starting up
    os.kill(demo.pid, signal.SIGINT)  # Ctrl-C, to the demo alone: it must stop its children itself
    assert demo.wait(120) == 130
    assert _survivors(prefix) == []  # its Spark JVM too
    assert named_under({"bootstrap.servers": bootstrap}, prefix) == ([], [])  # and its topics and groups


def test_a_demo_told_to_keep_its_topics_keeps_them(bootstrap: str, tmp_path: Path) -> None:
    output = tmp_path / "demo.out"
    demo = _demo(bootstrap, output, "--sentences", "20", "--rate", "100", "--poison", "0", "--no-crash-split",
                 "--no-kill-acker", "--keep")  # fmt: skip
    assert _ended(demo, output) == 0, output.read_text(errors="replace")[-3000:]
    found = re.search(r"named (demo-[0-9a-f]+)\*", output.read_text(errors="replace"))
    assert found is not None
    topics, groups = named_under({"bootstrap.servers": bootstrap}, found.group(1))
    try:
        assert f"{found.group(1)}.sentences" in topics and f"{found.group(1)}.acker" in groups
    finally:
        delete_topics({"bootstrap.servers": bootstrap}, topics)
        delete_groups({"bootstrap.servers": bootstrap}, groups)
