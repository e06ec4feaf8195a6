"""`ServiceConfig.failing_over_fast`: the session of runs that crash processes on purpose (the demo, `acker
wordcount run`), short enough that a dead member's partitions move well within a tree's timeout."""

from __future__ import annotations

from acker.config import ServiceConfig


def test_a_short_session_unless_the_users_own_settings_say_otherwise() -> None:
    assert ServiceConfig().failing_over_fast().kafka == {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
    given = ServiceConfig(kafka={"session.timeout.ms": "9000", "acks": "all"})
    fast = given.failing_over_fast()
    assert fast.kafka == {"session.timeout.ms": "9000", "heartbeat.interval.ms": "500", "acks": "all"}
    assert given.kafka == {"session.timeout.ms": "9000", "acks": "all"}  # a copy: the configuration given unchanged
    beats = ServiceConfig(kafka={"heartbeat.interval.ms": "1000"}).failing_over_fast()
    assert beats.kafka == {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"}


def test_with_the_new_group_protocol_the_broker_keeps_the_session_and_nothing_changes() -> None:
    """librdkafka refuses the classic session settings with ``group.protocol=consumer``."""
    given = ServiceConfig(kafka={"group.protocol": "CONSUMER"})
    assert given.failing_over_fast() == given
