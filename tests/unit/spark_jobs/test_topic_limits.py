"""The replay job's size limit of each topic: asked once, and not at every record where the broker does not say."""

from __future__ import annotations

from spark_jobs.replay_job import _LIMIT_RECHECK_S, TopicLimits


class _Broker:
    def __init__(self, limits: dict[str, int | None]) -> None:
        self.limits, self.asked = limits, 0

    def __call__(self, topic: str) -> int | None:
        self.asked += 1
        return self.limits[topic]


def test_a_topics_limit_is_asked_once_and_never_above_the_producers() -> None:
    broker = _Broker({"small": 1000, "large": 10**9})
    limits = TopicLimits(5000, broker)
    assert [limits("small"), limits("large"), limits("small"), limits("large")] == [1000, 5000, 1000, 5000]
    assert broker.asked == 2


def test_a_topic_the_broker_does_not_say_about_is_asked_again_only_after_a_while() -> None:
    """Asked at every record, with no right to describe the topic's configuration, each question waited up to 10 s
    inside the publication's transaction: a few nacks made it outlive its timeout, at every run of the batch."""
    now = [0.0]
    broker = _Broker({"rp.words": None})
    limits = TopicLimits(5000, broker, clock=lambda: now[0])
    assert [limits("rp.words") for _ in range(100)] == [5000] * 100
    assert broker.asked == 1
    now[0] += _LIMIT_RECHECK_S
    broker.limits["rp.words"] = 700  # told now (a topic just created is known by then)
    assert [limits("rp.words"), limits("rp.words")] == [700, 700]
    assert broker.asked == 2
