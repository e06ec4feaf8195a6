"""Configuration: precedence, types, pass-through and redaction."""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from acker.cli import main
from acker.config import CONSUMER_ONLY, TIMEOUT_MAX_S, ServiceConfig, add_arguments, load, to_argv
from acker.errors import ConfigError
from acker.kafka.client_log import client_logger
from acker.kafka.clients import open_transaction_wait_s


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults() -> None:
    config = load(_parse(), environ={})
    assert config == ServiceConfig()
    assert config.tick_interval_s == 15.0  # T / (buckets - 1)


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "acker.toml"
    path.write_text('buckets = 4\ntimeout_s = 9\ngroup = "from-file"\n[kafka]\n"security.protocol" = "SSL"\n')
    config = load(
        _parse("--config", str(path), "--group", "from-flag", "--kafka", "sasl.password=s3cret"),
        environ={"ACKER_TIMEOUT_S": "12", "ACKER_GROUP": "from-env", "ACKER_KAFKA_SASL_MECHANISM": "PLAIN"},
    )
    assert (config.buckets, config.timeout_s, config.group) == (4, 12.0, "from-flag")
    assert config.kafka == {"security.protocol": "SSL", "sasl.mechanism": "PLAIN", "sasl.password": "s3cret"}
    assert config.client()["bootstrap.servers"] == "127.0.0.1:9092"
    assert config.client()["sasl.password"] == "s3cret"
    assert config.redacted()["kafka"]["sasl.password"] == "***"
    assert "s3cret" not in repr(config.redacted())


def test_one_setting_in_every_layer_is_the_flags_then_the_environments_then_the_files(tmp_path: Path) -> None:
    path = tmp_path / "acker.toml"
    path.write_text('buckets = 4\n[kafka]\n"linger.ms" = "1"\n')
    environ = {"ACKER_BUCKETS": "5", "ACKER_KAFKA_LINGER_MS": "2"}
    file_only = load(_parse("--config", str(path)), environ={})
    over_file = load(_parse("--config", str(path)), environ=environ)
    over_all = load(_parse("--config", str(path), "--buckets", "6", "--kafka", "linger.ms=3"), environ=environ)
    assert [(c.buckets, c.kafka["linger.ms"]) for c in (file_only, over_file, over_all)] == [
        (4, "1"),
        (5, "2"),
        (6, "3"),
    ]


def test_a_value_refused_says_where_it_came_from_and_a_file_names_each_setting_once(tmp_path: Path) -> None:
    """``ACKER_BUCKETS=40`` made every command say "buckets must be between 2 and 32", without the environment; a
    file with both ``timeout_s`` and ``timeout-s`` took the second without a word; ``--config ""`` took the file of
    ``ACKER_CONFIG``."""
    with pytest.raises(ConfigError, match=r"buckets must be between 2 and 32, got 40.* \(from the environment\)$"):
        load(_parse(), environ={"ACKER_BUCKETS": "40"})
    with pytest.raises(ConfigError, match=r"^high_water must be .* \(from the flags\)$"):
        load(_parse("--high-water", "-1"), environ={})
    both = r"\(partitions from the environment, replication_factor from the flags\)$"
    with pytest.raises(ConfigError, match=both):  # two settings named: where each came from
        load(_parse("--replication-factor", "0"), environ={"ACKER_PARTITIONS": "6"})
    with pytest.raises(ConfigError, match=r"give the acker instances' group as group; .* own$"):  # not ACKER_GROUP's
        load(_parse("--kafka", "group.id=x"), environ={"ACKER_GROUP": "g"})
    with pytest.raises(ConfigError, match=r"^acker_topic: 'acker group' cannot .*\) \(from the flags\)$"):  # a value
        load(_parse("--acker-topic", "acker group"), environ={"ACKER_GROUP": "g"})
    with pytest.raises(ConfigError, match=r"^acker_topic: \"it's group\" cannot .*\) \(from the flags\)$"):
        load(_parse("--acker-topic", "it's group"), environ={"ACKER_GROUP": "g"})
    path = tmp_path / "acker.toml"
    path.write_text("timeout_s = 10\ntimeout-s = 20\n")
    with pytest.raises(ConfigError, match=r"setting timeout_s given twice in .*acker\.toml"):
        load(_parse("--config", str(path)), environ={})
    path.write_text("timeout_s = 0.0001\n")
    with pytest.raises(ConfigError, match=rf"leaves less than 1 ms between ticks \(from {re.escape(str(path))}\)"):
        load(_parse("--config", str(path)), environ={})
    assert load(_parse("--config", ""), environ={"ACKER_CONFIG": str(path)}) == ServiceConfig()


def test_dotted_librdkafka_keys_written_plainly_in_a_file_are_settings_and_stay_secret(tmp_path: Path) -> None:
    """TOML reads an unquoted ``sasl.password = ...`` as a nested table: it is the setting sasl.password all the same,
    and redacted as one."""
    path = tmp_path / "acker.toml"
    path.write_text('[kafka]\nsasl.mechanism = "PLAIN"\nsasl.password = "hunter2"\nenable.idempotence = true\n')
    config = load(_parse("--config", str(path)), environ={})
    assert config.kafka == {"sasl.mechanism": "PLAIN", "sasl.password": "hunter2", "enable.idempotence": "true"}
    assert "hunter2" not in repr(config.redacted())


def test_settings_read_as_numbers_take_plain_decimals_and_refuse_what_python_and_librdkafka_read_apart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "acker.toml"
    path.write_text('[kafka]\n"transaction.timeout.ms" = 90000\n"batch.size" = 16384\nlinger.ms = 0.5\n')
    config = load(_parse("--config", str(path)), environ={})
    assert config.kafka == {"transaction.timeout.ms": "90000", "batch.size": "16384", "linger.ms": "0.5"}
    assert open_transaction_wait_s(config.client()) == 120.0
    for linger in ("5.", ".5", "1e3", "1e-05"):  # a float Python prints so, as C reads it too
        assert load(_parse("--kafka", f"linger.ms={linger}"), environ={}).kafka["linger.ms"] == linger
    path.write_text('[kafka]\n"transaction.timeout.ms" = 9e4\n')  # a TOML float: "90000.0"
    with pytest.raises(ConfigError, match=r"transaction.timeout.ms must be a whole number \(as 60000\), got '90000.0'"):
        load(_parse("--config", str(path)), environ={})


def test_booleans_and_the_tracker_config() -> None:
    config = load(_parse("--relocate-on-update", "--high-water", "10"), environ={})
    tracker = config.tracker_config()
    assert tracker.relocate_on_update and tracker.high_water == 10
    assert load(_parse(), environ={"ACKER_RELOCATE_ON_UPDATE": "yes"}).relocate_on_update


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (("--buckets", "1"), {}, "buckets must be between 2 and 32, got 1"),  # the setting's range, not the tracker's
        (("--buckets", "33"), {}, "buckets must be between 2 and 32, got 33: each bucket slows"),
        (("--buckets", "three"), {}, r"setting buckets \(from the flags\): cannot read 'three' as int"),
        ((), {"ACKER_RELOCATE_ON_UPDATE": "maybe"}, r"relocate_on_update \(from the environment\): cannot read"),
        (("--timeout-s", "0"), {}, "timeout_s must be a positive number"),
        ((), {"ACKER_TIMEOUT_S": "nan"}, "timeout_s must be a positive number"),
        (("--timeout-s", "inf"), {}, "timeout_s must be a positive number"),
        (("--timeout-s", "0.001"), {}, "less than 1 ms between ticks"),
        (("--timeout-s", "1e306"), {}, r"timeout_s must be 2592000 s \(30 days\) at most"),  # OverflowError before
        (("--timeout-s", "2592001"), {}, r"timeout_s must be 2592000 s \(30 days\) at most"),
        ((), {"ACKER_COMMIT_INTERVAL_S": "1e-9"}, "commit_interval_s must be 0.01 s or more"),  # a commit per turn
        ((), {"ACKER_STATUS_INTERVAL_S": "0.001"}, "status_interval_s must be 0.01 s or more"),
        ((), {"ACKER_ACK_LINGER_MS": "-1"}, "ack_linger_ms must be 0 or more and below timeout_s"),
        ((), {"ACKER_ACK_LINGER_MS": "30000"}, r"below timeout_s \(30000 ms\), got 30000"),  # every tree timed out
        (("--kafka", "no-equals-sign"), {}, "KEY=VALUE"),
        (("--config", "/nonexistent.toml"), {}, "cannot read configuration file"),
        (("--metrics-port", "70000"), {}, "metrics_port must be a port number"),
        (("--bootstrap-servers", "a:9092", "--kafka", "bootstrap.servers=b:9092"), {}, "given twice in the flags"),
        (("--partitions", "200000"), {}, "partitions must be 1 to 100000"),
        (("--high-water", "-1"), {}, r"high_water must be 0 \(off\) or more, .*got -1"),  # NewTopic's traceback before
        (("--high-water", "99999999999999999999"), {}, r"below 2\*\*63"),  # OverflowError at the first record before
        ((), {"ACKER_BOOTSTRAP_SERVERS": " "}, "bootstrap_servers is empty"),  # "reachable at ?" before
        ((), {"ACKER_OUTCOME_TOPICS_PER_HOUR": "-5"}, r"outcome_topics_per_hour must be 0 \(none\) or more"),
        (("--dlq-topic", "bad name"), {}, r"dlq_topic: 'bad name' cannot name a Kafka topic"),
        (("--acker-topic", ".."), {}, r"acker_topic: '..' cannot name a Kafka topic"),
        (("--outcome-prefix", "out/"), {}, r"outcome_prefix: 'out/s' cannot name a Kafka topic"),
        (("--status-topic", "s" * 250), {}, r"status_topic: 'sss.*' cannot name a Kafka topic"),
        (("--replication-factor", "99999999999"), {}, r"replication_factor -1 \(the broker's default\) or 1 to 10000"),
        (("--replication-factor", "20000"), {}, "or 1 to 10000"),
        (("--replication-factor", "0"), {}, "or 1 to 10000"),
        (("--replication-factor", "-2"), {}, "or 1 to 10000"),
        (("--kafka", "error_cb=x"), {}, "error_cb: confluent-kafka takes a Python function"),
        (("--kafka", "transactional.id=t"), {}, "transactional.id: the producers that write in transactions"),
        # Settings read here as numbers: librdkafka takes these (it reads what they start with), int() did not, and
        # every tool that read one stopped with a traceback.
        ((), {"ACKER_KAFKA_TRANSACTION_TIMEOUT_MS": "90000.0"}, "transaction.timeout.ms must be a whole number"),
        (("--kafka", "batch.size=16k"), {}, r"batch.size must be a whole number \(as 60000\), got '16k'"),
        (("--kafka", "message.max.bytes=0x1000"), {}, "message.max.bytes must be a whole number"),
        (("--kafka", "message.max.bytes=010"), {}, "message.max.bytes must be a whole number"),  # 8 to librdkafka
        (("--kafka", "linger.ms=5ms"), {}, "linger.ms must be a number of milliseconds"),
        (("--kafka", "queue.buffering.max.ms=nan"), {}, "queue.buffering.max.ms must be a number of milliseconds"),
        (("--kafka", "linger.ms=5_0"), {}, "linger.ms must be a number of milliseconds"),  # 50 to Python, 5 to C
        (("--kafka", "linger.ms=1e999"), {}, "linger.ms must be a number of milliseconds"),
    ],
)
def test_bad_settings_give_clear_errors(argv: tuple[str, ...], environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(_parse(*argv), environ=environ)


_LATIN1 = os.fsdecode(b"\xe9")  # a byte the locale cannot decode, as Python reads it from the environment or argv


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        ((), {"ACKER_GROUP": f"g{_LATIN1}"}, r"group \(from the environment\)"),
        ((), {"ACKER_KAFKA_SASL_PASSWORD": f"secret{_LATIN1}"}, r"sasl\.password \(from the environment\)"),
        (("--bootstrap-servers", f"h{_LATIN1}:1"), {}, r"bootstrap_servers \(from the flags\)"),
        (("--kafka", f"sasl.username=u{_LATIN1}"), {}, r"sasl\.username \(from the flags\)"),
        ((), {f"ACKER_KAFKA_CLIENT_{_LATIN1}": "x"}, r"client\.\\udce9 \(from the environment\)"),
    ],
)
def test_a_setting_that_is_not_utf8_text_is_named_without_its_value(
    argv: tuple[str, ...], environ: dict[str, str], named: str
) -> None:
    """Passed on, confluent-kafka could not encode it: a traceback, or the process aborted in the consumer's
    constructor (status 134, no word of which setting)."""
    with pytest.raises(ConfigError, match=f"setting {named}: not UTF-8 text") as refused:
        load(_parse(*argv), environ=environ)
    assert "secret" not in str(refused.value) and "u" + _LATIN1 not in str(refused.value)


def test_a_value_that_is_not_utf8_text_ends_a_command_with_one_line() -> None:
    """The real process: ``acker status`` aborted (SIGABRT) in librdkafka's consumer, with no word of the setting."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACKER_")}
    environ["ACKER_GROUP"] = "g" + _LATIN1
    done = subprocess.run([sys.executable, "-m", "acker.cli", "status"], env=environ, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stderr.strip().splitlines()[-1].startswith("acker: setting group (from the environment): not UTF-8")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["watermarks", f"g{_LATIN1}"], "argument spout-groups"),  # a traceback from confluent-kafka before
        (["dlq", "list", "--topic", f"t{_LATIN1}"], "argument topic"),
    ],
)
def test_a_command_argument_that_is_not_utf8_text_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert main([*argv, "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == f"acker: {named}: not UTF-8 text (a byte the locale could not decode)\n"


def test_a_file_name_that_is_not_utf8_is_opened_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file name may hold any bytes: ``acker replay caf<E9>.jsonl`` was refused as "not UTF-8 text", which the same
    lines on standard input were not."""
    named = os.path.join(tmp_path, f"caf{_LATIN1}.jsonl")
    with open(named, "w", encoding="utf-8") as lines:
        lines.write('{"type": "tick"}\n')
    assert main(["replay", named]) == 0
    assert "not UTF-8" not in capsys.readouterr().err


def test_an_environment_variable_of_ours_that_names_no_setting_is_said(caplog: pytest.LogCaptureFixture) -> None:
    """ACKER_BOOTSTRAP_SERVER (no S) was ignored without a word: the default servers were used instead."""
    environ = {"ACKER_BOOTSTRAP_SERVER": "h:9092", "ACKER_KAFKA_LINGER_MS": "5", "ACKER_CACHE_DIR": "/c",
               "ACKER_TEST_BOOTSTRAP_SERVERS": "x", "ACKER_JAVA_KAFKA_SASL_JAAS_CONFIG": "y",
               "ACKER_GROUP": "g"}  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="acker.config"):
        config = load(_parse(), environ=environ)
    assert config.group == "g" and config.kafka == {"linger.ms": "5"}
    assert [r.getMessage() for r in caplog.records] == [
        "ignored: ACKER_BOOTSTRAP_SERVER (no such setting; librdkafka's go in ACKER_KAFKA_<NAME>)"
    ]


def test_a_count_in_a_file_must_be_a_whole_number(tmp_path: Path) -> None:
    path = tmp_path / "acker.toml"
    path.write_text("partitions = 2.7\n")
    with pytest.raises(ConfigError, match=r"cannot read 2\.7 as int"):
        load(_parse("--config", str(path)), environ={})
    path.write_text("partitions = true\n")
    with pytest.raises(ConfigError, match="cannot read True as int"):
        load(_parse("--config", str(path)), environ={})
    path.write_text("partitions = 6.0\n")
    assert load(_parse("--config", str(path)), environ={}).partitions == 6


def test_a_value_of_the_wrong_kind_in_a_file_is_refused(tmp_path: Path) -> None:
    """TOML's true for seconds used to be read as 1 s, a list for a name as its text, a kafka key that is not a
    table was a traceback."""
    path = tmp_path / "acker.toml"
    for text, message in (
        ("timeout_s = true\n", "cannot read True as float"),
        ('group = ["a", "b"]\n', "cannot read .* as str"),
        ('kafka = "security.protocol=SSL"\n', "must be a table"),
        ('[kafka]\nbootstrap.servers = ["a:9092", "b:9092"]\n', r"\[kafka\] bootstrap.servers: a string"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load(_parse("--config", str(path)), environ={})


def test_bootstrap_servers_given_as_the_librdkafka_setting_are_taken_not_replaced_by_the_default() -> None:
    for argv, environ in (
        (("--kafka", "bootstrap.servers=broker-1:9093"), {}),
        ((), {"ACKER_KAFKA_BOOTSTRAP_SERVERS": "broker-1:9093"}),
        (("--bootstrap-servers", "broker-1:9093", "--kafka", "bootstrap.servers=broker-1:9093"), {}),
    ):
        config = load(_parse(*argv), environ=environ)
        assert config.client()["bootstrap.servers"] == config.bootstrap_servers == "broker-1:9093"
        assert "bootstrap.servers" not in config.kafka
    with pytest.raises(ConfigError, match="as bootstrap_servers"):
        ServiceConfig(kafka={"bootstrap.servers": "b:9092"})
    # Each at its source's precedence: the environment's librdkafka setting over the file's, the flag over both.
    config = load(_parse(), environ={"ACKER_BOOTSTRAP_SERVERS": "env:1", "ACKER_KAFKA_BOOTSTRAP_SERVERS": "env:1"})
    assert config.bootstrap_servers == "env:1"
    config = load(_parse("--bootstrap-servers", "flag:1"), environ={"ACKER_KAFKA_BOOTSTRAP_SERVERS": "env:1"})
    assert config.bootstrap_servers == "flag:1"


def test_secrets_never_show_in_the_configuration_printed_nor_in_an_error_about_a_flag() -> None:
    config = load(_parse(), environ={"ACKER_KAFKA_SASL_PASSWORD": "hunter2", "ACKER_KAFKA_SSL_KEY_PASSWORD": "k3y"})
    assert "hunter2" not in repr(config) and "k3y" not in repr(config) and "sasl.password" in repr(config)
    for item in ("sasl.password:hunter2", "hunter2", "correct.horse.battery.hunter2"):  # a ':' for '=', alone
        with pytest.raises(ConfigError, match="got something without '='") as raised:
            load(_parse("--kafka", item), environ={})
        assert "hunter2" not in str(raised.value)


def test_a_client_error_quoting_a_secret_setting_is_shown_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    """librdkafka quotes the part of ``sasl.oauthbearer.config`` (secret: it may hold a token) that it cannot parse,
    and the command's last line repeated it."""
    config = load(_parse("--kafka", "sasl.oauthbearer.config=principal=admin lifeSeconds=hunter2 scope=x"), environ={})
    assert config.hide_secrets("non-integral 'lifeSeconds=': hunter2, at: lifeSeconds=hunter2 scope=x") == (
        "non-integral '***=': ***, at: ***=*** ***=x"
    )
    # The whole value quoted is hidden whole: word by word, its short words (never hidden alone) would show.
    assert config.hide_secrets("cannot parse 'principal=admin lifeSeconds=hunter2 scope=x'") == "cannot parse '***'"
    code = main(["status", "--bootstrap-servers", "127.0.0.1:1", "--kafka", "security.protocol=SASL_PLAINTEXT",
                 "--kafka", "sasl.mechanism=OAUTHBEARER", "--kafka", "enable.sasl.oauthbearer.unsecure.jwt=true",
                 "--kafka", "sasl.oauthbearer.config=principal=admin hunter2secret=x"])  # fmt: skip
    said = capsys.readouterr().err
    assert code == 2 and "sasl.oauthbearer.config" in said and "hunter2" not in said, said


def test_a_short_secret_is_hidden_where_it_stands_apart_and_leaves_the_error_s_own_words_whole() -> None:
    config = load(_parse("--kafka", "sasl.password=b", "--kafka", "ssl.key.password=k3y"), environ={})
    said = "SASL authentication error: b (k3y) at sasl_plaintext://127.0.0.1:9092/bootstrap: b=k3y"
    assert config.hide_secrets(said) == (
        "SASL authentication error: *** (***) at sasl_plaintext://127.0.0.1:9092/bootstrap: ***=***"
    )


def test_unknown_setting_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "acker.toml"
    path.write_text("bukets = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'bukets'"):
        load(_parse("--config", str(path)), environ={})


def test_help_names_the_environment_variable_of_every_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    for name in ("ACKER_BOOTSTRAP_SERVERS", "ACKER_TIMEOUT_S", "ACKER_HIGH_WATER", "ACKER_KAFKA_<KEY>", "ACKER_CONFIG"):
        assert name in text.replace("\n", "").replace(" ", "")


def test_usage_shows_the_command_own_options_and_the_settings_as_one_word() -> None:
    parser = argparse.ArgumentParser(prog="acker x", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    add_arguments(parser)
    parser.add_argument("place", nargs="+")
    usage = parser.format_usage()
    assert usage.split() == ["usage:", "acker", "x", "[-h]", "[--json]", "place", "[place", "...]", "[settings]"]
    help_text = parser.format_help()
    for flag in ("--bootstrap-servers", "--relocate-on-update", "--no-relocate-on-update", "--kafka", "--config"):
        assert flag in help_text  # listed in the help, in their group
    formatter = parser.formatter_class
    assert isinstance(formatter, type) and issubclass(formatter, argparse.RawDescriptionHelpFormatter)  # kept
    args = parser.parse_args(["p", "--partitions", "3", "--json"])  # the settings are still taken anywhere
    assert (args.partitions, args.json, args.place) == ("3", True, ["p"])


def test_to_argv_round_trips_and_keeps_librdkafka_settings_off_the_command_line() -> None:
    config = ServiceConfig(
        buckets=4,
        relocate_on_update=True,
        timeout_s=7.5,
        kafka={"sasl.password": "s3cret", "session.timeout.ms": "6000"},
    )
    argv, env = to_argv(config)
    assert "s3cret" not in " ".join(argv)
    assert load(_parse(*argv), environ=env) == config
    assert load(_parse(*to_argv(ServiceConfig())[0]), environ={}) == ServiceConfig()
    dashed = ServiceConfig(acker_topic="-x", instance_id="-i")  # names Kafka takes: not taken for flags
    assert load(_parse(*to_argv(dashed)[0]), environ={}) == dashed


def test_a_librdkafka_setting_it_cannot_take_is_a_clear_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--kafka", "no.such.property=1", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert 'No such configuration property: "no.such.property"' in capsys.readouterr().err


def test_a_namespaced_configuration_names_every_topic_and_the_group_under_its_prefix() -> None:
    config = ServiceConfig(partitions=3).namespaced("run-1")
    names = (config.acker_topic, config.group, config.dlq_topic, config.replay_dlq_topic, config.status_topic)
    assert all(name.startswith("run-1.") for name in names)
    assert (config.outcome_topic("s"), config.replay_topic("s")) == ("run-1.outcomes.s", "run-1.replay.s")
    assert config.partitions == 3


def test_stream_consumers_fetch_again_soon_after_a_full_queue_unless_told_otherwise() -> None:
    plain = ServiceConfig(bootstrap_servers="b:9092")
    assert plain.stream_consumer(**{"group.id": "g"}) == {
        "fetch.queue.backoff.ms": 20, "bootstrap.servers": "b:9092", "logger": client_logger(),
        "group.id": "g"}  # fmt: skip
    assert "fetch.queue.backoff.ms" not in plain.client()  # producers and admin clients do not take it
    mine = ServiceConfig(bootstrap_servers="b:9092", kafka={"fetch.queue.backoff.ms": "500"})
    assert mine.stream_consumer()["fetch.queue.backoff.ms"] == "500"
    assert mine.stream_consumer(**{"fetch.queue.backoff.ms": 5})["fetch.queue.backoff.ms"] == 5


def test_with_the_new_group_protocol_stream_consumers_leave_the_assignment_to_the_broker() -> None:
    cooperative = {"partition.assignment.strategy": "cooperative-sticky"}
    classic = ServiceConfig(bootstrap_servers="b:9092")
    assert classic.stream_consumer(**cooperative)["partition.assignment.strategy"] == "cooperative-sticky"
    new = ServiceConfig(bootstrap_servers="b:9092", kafka={"group.protocol": "consumer"})
    settings = new.stream_consumer(**cooperative)
    assert "partition.assignment.strategy" not in settings and settings["group.protocol"] == "consumer"
    Consumer({**settings, "group.id": "g"}).close()  # the client accepts it (it refuses the assignor)


def test_the_new_group_protocol_with_settings_it_leaves_to_the_broker_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"session\.timeout\.ms"):
        ServiceConfig(kafka={"group.protocol": "consumer", "session.timeout.ms": "6000"})


def test_stage_producers_linger_20_ms_unless_told_otherwise_and_are_always_idempotent() -> None:
    plain = ServiceConfig(bootstrap_servers="b:9092").stage_producer()
    assert plain == {"linger.ms": 20, "delivery.report.only.error": True, "bootstrap.servers": "b:9092",
                     "logger": client_logger(), "enable.idempotence": True}  # fmt: skip
    mine = ServiceConfig(bootstrap_servers="b:9092", kafka={"linger.ms": "5", "enable.idempotence": "false"})
    assert mine.stage_producer()["linger.ms"] == "5"
    assert mine.stage_producer()["enable.idempotence"] is True  # a duplicate would cancel an edge of the ledger
    assert mine.stage_producer(**{"enable.idempotence": False})["enable.idempotence"] is True


def test_only_the_stages_producers_report_failed_deliveries_alone_whatever_the_pass_through_says() -> None:
    """Given to every producer, the stages' setting left the service's without success reports: it never committed
    its recovery offsets, and `acker wordcount produce` named no record written."""
    for said in ("true", "false"):
        config = ServiceConfig(bootstrap_servers="b:9092", kafka={"delivery.report.only.error": said})
        assert config.producer()["delivery.report.only.error"] is False
        assert config.producer(**{"linger.ms": 1})["delivery.report.only.error"] is False
        assert config.stage_producer()["delivery.report.only.error"] is True


_CONSUMER_VALUES = {
    "group.id": "g", "group.instance.id": "i", "group.protocol": "classic", "group.remote.assignor": "uniform",
    "partition.assignment.strategy": "range", "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    "enable.auto.commit": "true", "enable.auto.offset.store": "true", "enable.partition.eof": "true",
    "check.crcs": "true",
}  # fmt: skip


def _producer_warnings(settings: dict[str, str]) -> list[str]:
    """What librdkafka itself says about ``settings`` in a producer (a real one, never connected)."""
    log = logging.getLogger(f"test-confwarn-{uuid.uuid4().hex}")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    log.propagate = False
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", **settings, "logger": log})
    producer.poll(0.1)  # serves the log queue
    return [line for line in seen if "is a consumer property" in line]


@pytest.mark.parametrize("key", sorted(set(CONSUMER_ONLY) - {"group.id"}))  # refused: `test_topics_and_group...`
def test_producers_leave_out_exactly_the_settings_librdkafka_ignores_in_them(key: str) -> None:
    assert _producer_warnings({key: _CONSUMER_VALUES.get(key, "1000")})  # librdkafka: a consumer's only
    config = ServiceConfig(bootstrap_servers="b:9092", kafka={key: _CONSUMER_VALUES.get(key, "1000"), "linger.ms": "7"})
    assert key not in config.producer() and config.producer()["linger.ms"] == "7"
    assert key not in config.stage_producer() and key in config.client()


def test_a_producer_setting_is_not_taken_for_a_consumer_one() -> None:
    assert not _producer_warnings({"linger.ms": "7", "enable.idempotence": "true", "client.id": "x"})


def test_a_configuration_file_that_is_not_utf8_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "acker.toml"
    path.write_bytes(b'instance_id = "\xff"\n')
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load(_parse("--config", str(path)), environ={})


def test_the_logged_configuration_names_the_instance_also_by_default() -> None:
    """It said ``instance_id: ''`` where the instance went by ``host:pid`` everywhere else."""

    assert (
        ServiceConfig().redacted()["instance_id"] == f"{socket.gethostname()}:{os.getpid()}" == ServiceConfig().instance
    )
    assert ServiceConfig(instance_id="a-1").redacted()["instance_id"] == "a-1"


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"dlq_topic": "acker"}, "acker_topic and dlq_topic are both 'acker'"),  # its dead letters read back: no end
        ({"status_topic": "acker.dlq"}, "status_topic and dlq_topic are both"),
        ({"replay_dlq_topic": "acker.replay.progress"}, "replay_dlq_topic and the replay job's progress topic are"),
        ({"status_topic": "acker.outcomes.dlq"}, "status_topic and the Spark jobs' dead-letter topic are both"),
        ({"replay_prefix": "acker.outcomes."}, "are both 'acker.outcomes.'"),  # outcomes read as replays
        ({"group": " "}, "group is empty"),  # librdkafka aborted the process
        ({"kafka": {"group.id": "g"}}, "group.id: give the acker instances' group as group"),  # ignored, silently
    ],
)
def test_topics_and_group_that_would_collide_or_abort_are_refused(settings: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)):
        ServiceConfig(**settings)
    ServiceConfig(dlq_topic="acker.replay.dlq")  # dead letters of both kinds in one topic: nothing reads it back


def test_a_record_written_out_is_given_up_once_its_tree_has_timed_out_unless_the_settings_say_otherwise() -> None:
    """Held through a broker's outage, a word's count landed after the word's next count process had read the last
    counts and gone on from them: the word's last count went back below the times it was counted."""
    assert ServiceConfig(timeout_s=4.0, buckets=3).sink_producer()["message.timeout.ms"] == 6000  # 4 s + a tick of 2
    assert ServiceConfig(timeout_s=0.01, buckets=3, ack_linger_ms=0).sink_producer()["message.timeout.ms"] == 1000
    assert (
        ServiceConfig(timeout_s=4.0, kafka={"message.timeout.ms": "9000"}).sink_producer()["message.timeout.ms"]
        == "9000"
    )
    given = ServiceConfig(timeout_s=4.0, kafka={"delivery.timeout.ms": "9000"}).sink_producer()  # its other name
    assert "message.timeout.ms" not in given and given["delivery.timeout.ms"] == "9000"
    for linger in ("linger.ms", "queue.buffering.max.ms"):
        slow = ServiceConfig(timeout_s=0.01, buckets=3, ack_linger_ms=0, kafka={linger: "1500"})
        assert slow.sink_producer()["message.timeout.ms"] == 1501
        Producer(slow.sink_producer())  # at linger.ms or below, librdkafka refuses it
    assert "message.timeout.ms" not in ServiceConfig(timeout_s=4.0).stage_producer()  # children and acks: as before
    for config in (ServiceConfig(timeout_s=0.01, buckets=3, ack_linger_ms=0), ServiceConfig(timeout_s=TIMEOUT_MAX_S)):
        Producer(config.sink_producer())  # librdkafka takes it (below linger.ms, or past 24.8 days, it would not)
