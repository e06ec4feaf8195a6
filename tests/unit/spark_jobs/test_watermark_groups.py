"""Where a spout seeks and where the Spark jobs commit and look are one group, whatever the spout's group is called."""

from __future__ import annotations

from acker.spout import SpoutSettings
from spark_jobs.commit_job import CommitJobSettings, OutcomeSource
from spark_jobs.replay_job import ReplayJobSettings


def test_the_spout_and_both_jobs_name_the_same_watermark_group() -> None:
    """A spout group ending in .acked: the jobs took that group itself (the spout's own consumer group) for its
    watermark group, and the spout sought in another."""
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.s",))
    for group in ("", "orders", "orders.acked"):
        spout = SpoutSettings("s", "in", "out", group=group)
        jobs = {"s": group} if group else {}
        commit = CommitJobSettings(source, "unused", groups=jobs).watermark_group("s")
        replay = ReplayJobSettings(source, "unused", groups=jobs).watermark_group("s")
        assert spout.watermark_group == commit == replay == f"{group or 's'}.acked"
