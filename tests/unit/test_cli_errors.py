"""What a user sees of the CLI: help that reads as prose; when it cannot do its job, one line saying why and what
to check, exit status 2."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from acker import cli, dlq, logs
from acker import topics as acker_topics
from acker.config import ServiceConfig
from acker.errors import AckerError, ConfigError
from acker.examples import reach, wordcount_cli
from acker.examples.wordcount import _crasher
from acker.help_text import prose
from acker.kafka import clients, local_broker
from acker.metrics import serve
from spark_jobs import cli as spark_cli
from spark_jobs import commit_job
from spark_jobs.cli import query_said, starting_offsets
from spark_jobs.replay_job import ReplayJobSettings


def test_kafka_not_answering_names_the_bootstrap_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_answer(*_args: Any, **_kwargs: Any) -> list[str]:
        raise TimeoutError  # what an admin request's future raises: no message at all

    monkeypatch.setattr(acker_topics, "answering", lambda *_: None)  # asked first: it answers, then times out
    monkeypatch.setattr(acker_topics, "create_topics", no_answer)
    assert cli.main(["topics", "create", "--bootstrap-servers", "kafka.example:9092"]) == 2
    assert capsys.readouterr().err.strip() == (
        "acker: Kafka did not answer in time: is it running, and reachable at kafka.example:9092?"
    )


def test_kafka_not_answering_names_the_bootstrap_servers_given_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_answer(*_args: Any, **_kwargs: Any) -> list[str]:
        raise TimeoutError

    monkeypatch.setattr(acker_topics, "answering", lambda *_: None)
    monkeypatch.setattr(acker_topics, "create_topics", no_answer)
    monkeypatch.setenv("ACKER_BOOTSTRAP_SERVERS", "kafka.env:9092")
    assert cli.main(["topics", "create"]) == 2
    assert "reachable at kafka.env:9092?" in capsys.readouterr().err


def test_sentences_not_delivered_are_an_error_not_zero_written(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`wordcount produce` against a broker that does not answer printed "0 sentences written" and exit status 0."""

    class Unanswered:
        def __init__(self, _config: dict[str, Any]) -> None:
            self.queued = 0

        def produce(self, *_args: Any, **_kwargs: Any) -> None:
            self.queued += 1

        def flush(self, _timeout: float) -> int:
            return self.queued

    monkeypatch.setattr(wordcount_cli, "Producer", Unanswered)
    assert cli.main(["wordcount", "produce", "--sentences", "3", "--bootstrap-servers", "kafka.example:9092"]) == 2
    captured = capsys.readouterr()
    assert "reachable at kafka.example:9092?" in captured.err and "written" not in captured.out


def test_a_dead_letter_command_without_kafka_says_so_not_that_the_topic_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_answer(*_args: Any, **_kwargs: Any) -> int:
        raise clients.KafkaClientError("reading metadata of t", KafkaError(KafkaError._TRANSPORT, "Broker transport"))

    monkeypatch.setattr(dlq, "partition_count", no_answer)
    assert cli.main(["dlq", "list", "--bootstrap-servers", "kafka.example:9092"]) == 2
    error = capsys.readouterr().err
    assert "is it running, and reachable at kafka.example:9092?" in error and "no dead-letter topic" not in error


def test_a_metrics_port_in_use_says_which_and_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"metrics port {port}: .*--metrics-port"):
            serve(port)


@pytest.mark.parametrize("stage", [["wordcount", "spout"], ["wordcount", "split"], ["wordcount", "count"],
                                   ["reach", "step", "1"]])  # fmt: skip
def test_a_stage_metrics_port_in_use_stops_the_stage_before_it_makes_a_client(
    stage: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bound after the stage was built, a refused port left a consumer in its group unclosed, and the process spun in
    librdkafka's destroy instead of exiting."""
    monkeypatch.setattr("acker.spout.Spout.__init__", lambda *_, **__: pytest.fail("a spout built"))
    monkeypatch.setattr("acker.bolt.Bolt.__init__", lambda *_, **__: pytest.fail("a bolt built"))
    monkeypatch.setattr("acker.examples.wordcount_cli.published_counts", lambda *_: pytest.fail("a client made"))
    monkeypatch.setattr("acker.kafka.coordinated_stage.CoordinatedStage.__init__", lambda *_: pytest.fail("a step"))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [*stage, "--stage-metrics-port", str(port), "--bootstrap-servers", "kafka.example:9092"]
        assert cli.main(argv) == 2
    assert f"metrics port {port}: " in (error := capsys.readouterr().err) and "--stage-metrics-port" in error


def test_a_spark_job_without_spouts_or_a_pattern_says_so_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: pytest.fail("Spark started"))
    assert cli.main(["spark", "commit", "--checkpoint", "/nowhere"]) == 2
    assert "--spout" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["spark", "commit", "--checkpoint", "/nowhere", "--spout", "s"], ["demo"]])
def test_a_command_that_runs_spark_where_pyspark_is_not_installed_says_how_to_install_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain install (``pip install kafka-acker``) lists them: a traceback of ModuleNotFoundError, the demo's after
    it had started its broker and stages."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else find_spec(name, *a)
    )
    monkeypatch.setattr("acker.examples.demo.run", lambda *_, **__: pytest.fail("the demo started"))
    monkeypatch.setattr("spark_jobs.cli._checked", lambda *_, **__: pytest.fail("the job started"))
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        f"acker: acker {argv[0]} runs Spark, which is not installed here: pip install 'kafka-acker[spark]'\n"
    )


def test_a_pattern_that_is_not_a_regular_expression_is_refused_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark's queries stopped at once on it, each with a Java stack trace, after the job had said it was running."""
    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: pytest.fail("Spark started"))
    assert cli.main(["spark", "replay", "--checkpoint", "/nowhere", "--pattern", "acker.outcomes.[a-z"]) == 2
    assert "--pattern 'acker.outcomes.[a-z' is not a regular expression" in capsys.readouterr().err


def test_a_spout_group_of_a_spout_not_read_is_refused_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt spout in --spout-group was ignored: the job wrote the watermark to the group named after the spout
    read, and the spout, finding none in its own group, started over from its reset policy."""
    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: pytest.fail("Spark started"))
    argv = ["spark", "commit", "--checkpoint", "/nowhere", "--spout", "sentences"]
    assert cli.main([*argv, "--spout-group", "sentence=wc-spout"]) == 2
    assert "--spout-group names sentence, which no --spout names" in capsys.readouterr().err
    assert cli.main([*argv, "--spout-group", "sentences"]) == 2
    assert "--spout-group takes SPOUT=GROUP" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--trees", "-5"],
        ["simulate", "--fail-rate", "2"],
        ["simulate", "--drop-rate", "nan"],
        ["dlq", "list", "--limit", "-3"],
        ["spark", "replay", "--checkpoint", "/x", "--nacks-per-transaction", "0"],
        ["spark", "commit", "--checkpoint", "/x", "--max-records", "-1"],
        ["wordcount", "run", "--split-processes", "0"],
        ["wordcount", "run", "--max-wait-s", "0"],
        ["demo", "--fail-rate", "1.5"],
        ["demo", "--split-processes", "0"],
        ["spark", "commit", "--checkpoint", "/x", "--trigger-s", "-1"],
        ["spark", "commit", "--checkpoint", "/x", "--trigger-s", "nan"],
        ["spark", "replay", "--checkpoint", "/x", "--backoff-ms", "86400000"],  # a spout would not believe it
        ["spark", "replay", "--checkpoint", "/x", "--dedupe-window-s", "0"],
        ["spark", "replay", "--checkpoint", "/x", "--dedupe-window-s", str(30 * 86_400 + 1)],
        ["simulate", "--buckets", "33"],  # no service runs so
    ],
)
def test_numbers_out_of_range_are_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert "must be" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--trees", str(10**20)], ["--trees", "1", "--fanout", str(10**8)]])
def test_a_simulation_too_large_to_hold_is_refused_at_once(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """100,000,000 trees printed nothing for minutes, then ran out of memory: every message is held."""
    assert cli.main(["simulate", *argv]) == 2
    assert "20,000,000 at most" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_group_name_is_a_usage_error(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``acker watermarks ''`` asked Kafka for a group of no name and said there were none in it."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["watermarks", "wc-spout", name])
    assert exit_.value.code == 2
    assert "a consumer group's name, not empty" in capsys.readouterr().err


def test_acker_replay_takes_the_services_tracker_settings_and_checks_them_as_the_service_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its own --buckets, --high-water and --relocate-on-update ignored ``ACKER_BUCKETS`` and a --config file: an
    export piped to it where the service's settings are in the environment (the tools container) was decided with
    others; and it took 100 buckets, which no service can run with."""
    lines = tmp_path / "lines.jsonl"
    init = '{"type": "init", "anchor": 5, "spout": "S", "msg_id": "M", "value": 3}'
    lines.write_text("\n".join([init, *['{"type": "tick"}'] * 3, '{"type": "ack", "anchor": 5, "value": 3}']) + "\n")
    assert cli.main(["replay", str(lines)]) == 0  # 3 buckets: timed out at the third tick
    assert '"reason": "timeout"' in capsys.readouterr().out.replace('":"', '": "')
    monkeypatch.setenv("ACKER_BUCKETS", "5")
    assert cli.main(["replay", str(lines)]) == 0
    assert '"outcome": "ack"' in capsys.readouterr().out.replace('":"', '": "')
    assert cli.main(["replay", "--buckets", "3", str(lines)]) == 0  # a flag over the environment
    assert "timeout" in capsys.readouterr().out
    for wrong in (["--buckets", "100"], ["--high-water", str(2**64)]):  # numba's TypingError for the second, before
        assert cli.main(["replay", "--engine", "columnar", *wrong, str(lines)]) == 2
        assert "must be" in capsys.readouterr().err


def test_command_help_reads_as_prose(capsys: pytest.CaptureFixture[str]) -> None:
    assert prose("the acker's (``dlq_topic``), see `acker.retries`") == "the acker's (dlq_topic), see acker.retries"
    for command in ([], ["dlq"], ["demo"], ["reach"], ["wordcount"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main([*command, "--help"])
        out = capsys.readouterr().out
        assert exit_.value.code == 0 and out.startswith("usage:")  # the help itself, not a usage error's silence
        assert "`" not in out


@pytest.mark.parametrize(
    ("command", "missing"),
    [([], "COMMAND"), (["topics"], "COMMAND"), (["dlq"], "COMMAND"), (["wordcount"], "STAGE"), (["spark"], "JOB")],
)
def test_a_command_without_its_sub_command_names_what_is_missing_as_the_usage_does(
    command: list[str], missing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "required: topics_command", a name of the code's."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(command)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.endswith(f"the following arguments are required: {missing}\n")
    assert f" {missing} ..." in err.splitlines()[0]  # the usage line says it the same way


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("acker ")


def test_a_setting_the_kafka_client_refuses_reads_as_its_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--bootstrap-servers", "b:9092", "--kafka", "no.such.setting=1"]) == 2
    assert capsys.readouterr().err.strip() == 'acker: Kafka client: No such configuration property: "no.such.setting"'


@pytest.mark.parametrize(
    ("topics", "said"),
    [
        (["--topic", "mine:2", "--topic", "mine:3"], "--topic mine given with 2 and 3 partitions"),
        (["--topic", "acker:4"], "--topic acker: one of the acker's own topics, made here with its own settings"),
    ],
)
def test_topics_create_refuses_a_topic_named_twice_before_asking_kafka(
    topics: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kafka refuses a request that names a topic twice: each of them was "not created: Duplicate topic name"."""
    assert cli.main(["topics", "create", "--bootstrap-servers", "127.0.0.1:1", *topics]) == 2
    assert capsys.readouterr().err.strip() == f"acker: {said}"


def test_topics_not_created_are_named_alike_on_stdout_and_stderr_and_the_others_listed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One topic refused, one unanswered, one made: stdout gives each its line (the cause whole), stderr's last line
    names those not made with the cause's short name, the unanswered one in the same words as on stdout."""
    refused = KafkaError(KafkaError.TOPIC_EXCEPTION, "Topic name is invalid")

    def partly(*_args: Any, **_kwargs: Any) -> list[str]:
        raise clients.TopicsNotCreatedError({"a": refused, "b": None}, ["c"])

    monkeypatch.setattr(acker_topics, "answering", lambda *_: None)
    monkeypatch.setattr(acker_topics, "create_topics", partly)
    specs = [clients.TopicSpec(name, 2) for name in "abc"]
    with pytest.raises(AckerError) as failed:
        acker_topics.create_and_report(ServiceConfig(bootstrap_servers="127.0.0.1:1"), specs)
    assert capsys.readouterr().out.splitlines() == [
        "a\t-\tnot created: Topic name is invalid",
        "b\t-\tnot created: no answer in time",
        "c\t2 partition(s)\tcreated",
    ]
    assert str(failed.value) == (
        "not created: a (TOPIC_EXCEPTION), b (no answer in time): each one's line on stdout says why"
    )


@pytest.mark.parametrize("command", [["status"], ["topics", "create"], ["demo"]])
def test_no_broker_reads_as_such_in_every_command(
    command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`acker status` said "Kafka client: Failed to get metadata: Local: Broker transport failure" where `acker run`
    asks whether Kafka is running, and reachable where the settings say; `acker topics create` said "not created:
    Failed while waiting for controller: Local: Timed out" for each topic, after 30 s; `acker demo` said the same of
    each of its topics after 45 s, and that it left behind its topics and groups, though none had been made."""
    monkeypatch.chdir(tmp_path)  # the demo's runs directory, were it to get that far
    assert cli.main([*command, "--bootstrap-servers", "127.0.0.1:1"]) == 2
    captured = capsys.readouterr()
    said = captured.err.strip().splitlines()[-1]
    assert said.startswith("acker: Kafka did not answer (") and said.endswith(
        "is it running, and reachable at 127.0.0.1:1?"
    )
    assert "not created" not in captured.out and "left behind" not in captured.out


def test_a_wordcount_stage_says_what_it_serves_when_it_starts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(wordcount_cli, "Bolt", lambda *args, **kwargs: args)  # no Kafka: the first line only
    monkeypatch.setattr(wordcount_cli, "count_bolt", lambda *args, **kwargs: args)
    monkeypatch.setattr(wordcount_cli, "run_until_signalled", lambda stage: 0)
    with caplog.at_level("INFO", logger="acker.wordcount"):
        assert cli.main(["wordcount", "count", "--bootstrap-servers", "b:9092", "--prefix", "p"]) == 0
    assert "count bolt: p.words -> p.counts as group p-count; Kafka at b:9092" in caplog.text


def test_a_log_level_in_any_case_or_a_wrong_one_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--log-level", "verbose", "--bootstrap-servers", "b:9092"]) == 2
    assert capsys.readouterr().err.strip() == "acker: log level 'verbose': one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    logs.configure("info")  # as --log-level info: no error


def test_py4j_shows_its_warnings_only_unless_debugging() -> None:
    py4j = logging.getLogger("py4j.clientserver")  # logs each call the JVM makes into Python at INFO
    try:
        logs.configure("INFO")
        assert not py4j.isEnabledFor(logging.INFO) and py4j.isEnabledFor(logging.WARNING)
        logs.configure("error")
        assert not py4j.isEnabledFor(logging.WARNING)  # nor more than the application's own lines
        logs.configure("debug")  # its info lines, never its debug lines: every command sent to the JVM, secrets too
        assert py4j.isEnabledFor(logging.INFO) and not py4j.isEnabledFor(logging.DEBUG)
    finally:
        logging.getLogger("py4j").setLevel(logging.NOTSET)


def test_py4j_lines_through_the_root_logger_are_not_the_applications() -> None:
    """py4j logs "Exception while sending command." with a stack trace on the root logger, at INFO, whenever
    Spark's JVM has gone (a job stopped with its process group, as systemd does): not a line of the job's."""

    def record(name: str, path: str, level: int = logging.INFO) -> logging.LogRecord:
        return logging.LogRecord(name, level, path, 1, "Exception while sending command.", None, None)

    py4j_file = "/venv/lib/python3.11/site-packages/py4j/java_gateway.py"
    assert not logs._chatty_through_root(record("root", py4j_file))
    assert logs._chatty_through_root(record("root", py4j_file, logging.WARNING))
    assert logs._chatty_through_root(record("root", "/work/acker/service.py"))
    assert logs._chatty_through_root(record("spark_jobs.cli", py4j_file))


def test_the_demo_stages_take_the_demo_settings_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo runs on its own broker; an ``ACKER_CONFIG`` or ``ACKER_KAFKA_*`` of the shell (SASL for a real
    cluster, say) reached its stages, which then could not talk to it."""
    monkeypatch.setenv("ACKER_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("ACKER_CONFIG", "/etc/acker/prod.toml")
    stages = wordcount_cli.PipelineStages(log=lambda _line: None, settings_given_only=True)
    stages.start("t", (["true"], {"ACKER_KAFKA_LINGER_MS": "5"}))  # the command's own settings are kept
    stages.running["t"][1].wait()
    assert {k for k in stages.environments["t"] if k.startswith("ACKER_")} == {"ACKER_KAFKA_LINGER_MS"}
    assert stages.environments["t"]["PATH"] == os.environ["PATH"]
    plain = wordcount_cli.PipelineStages(log=lambda _line: None)
    plain.start("t", (["true"], {}))
    plain.running["t"][1].wait()
    # `wordcount run` takes the environment's settings, but not its file: the runner read the settings (from that
    # file, or from its --config, which comes first) and gives them to each stage itself (`to_argv`).
    environment = plain.environments["t"]
    assert environment["ACKER_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and "ACKER_CONFIG" not in environment


@pytest.mark.parametrize("place", ["0/99999999999999999999", "-1/3", "2/-5", "x", "3/", "2147483648/0"])
def test_a_place_kafka_cannot_have_is_refused_in_one_line(place: str) -> None:
    with pytest.raises(dlq.DlqError, match="not a record's place"):
        dlq.parse_coordinates(place)
    assert dlq.parse_coordinates("2/7") == (2, 7) and dlq.parse_coordinates("7") == (0, 7)


@pytest.mark.parametrize("command", ["show", "redrive"])
def test_a_mistyped_dead_letter_place_is_refused_before_kafka_is_asked(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Port 1 answers nothing: asked first, Kafka's silence was said 10 s later instead of the mistyped place."""
    assert cli.main(["dlq", command, "--bootstrap-servers", "127.0.0.1:1", "0/7", "abc"]) == 2
    assert "not a record's place: 'abc'" in capsys.readouterr().err
    if command == "redrive":
        assert cli.main(["dlq", command, "--bootstrap-servers", "127.0.0.1:1", "--topic", "acker.replay.s", "0/7"]) == 2
        assert "is a replay topic, not a dead-letter topic" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["earliest", "latest", " Latest ", '{"t": {"0": 23, "1": -2}}'])
def test_spark_starting_offsets_are_checked_before_spark_starts(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert starting_offsets(value) == (value if value.startswith("{") else value.strip().lower())  # as Spark reads it
    for wrong in ("earlist", '{"t": 5}', '{"t": {"0": "x"}}', '{"t": {"x": 1}}', "{}", "[" * 3000,
                  '{"t": {"\u00b2": 1}}', '{"t": {"0": 99999999999999999999}}'):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            cli.main(["spark", "commit", "--checkpoint", "/x", "--starting-offsets", wrong])
        assert exit_.value.code == 2
        assert "earliest, latest, or JSON" in capsys.readouterr().err


def test_spark_starting_offsets_must_name_every_partition_read_and_no_other_topic(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark's query stopped at its start with a Java assertion and the query's plan (80 lines, exit status 1)."""
    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: pytest.fail("Spark started"))
    monkeypatch.setattr(commit_job, "answering", lambda *_: None)  # Kafka answers
    monkeypatch.setattr(commit_job, "partition_count", lambda _client, _topic: 2)  # every outcome topic: 2
    argv = ["spark", "commit", "--checkpoint", "/x", "--spout", "s", "--starting-offsets"]
    for offsets, said in (
        ('{"acker.outcomes.s": {"0": 5}}', "names no offset for acker.outcomes.s partition(s) 1: Spark needs one"),
        ('{"acker.outcomes.s": {"0": 5, "1": -2}, "other": {"0": 0}}', "names other, which the job does not read"),
        # Spark refused those at its first batch, with its Java trace (exit 1).
        ('{"acker.outcomes.s": {"0": 5, "1": -2, "7": 1}}', "names acker.outcomes.s partition(s) 7, which it does not"),
    ):
        assert cli.main([*argv, offsets]) == 2
        assert said in capsys.readouterr().err
    source = commit_job.OutcomeSource({"bootstrap.servers": "h:1"}, ("acker.outcomes.s",), starting_offsets=(
        '{"acker.outcomes.s": {"0": 5, "1": -2}}'))  # fmt: skip
    source.check_topics()  # every partition named


def test_settings_the_replay_jobs_transactional_producer_refuses_are_refused_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job made its producer at its first micro-batch: Python's traceback twice and the query's plan (exit 1)."""
    monkeypatch.setattr(commit_job, "answering", lambda *_: None)  # Kafka answers
    monkeypatch.setattr(commit_job, "partition_count", lambda _client, _topic: 1)
    argv = ["spark", "replay", "--checkpoint", "/x", "--spout", "s", "--bootstrap-servers", "127.0.0.1:1"]
    assert cli.main([*argv, "--kafka", "acks=1"]) == 2
    assert "`acks` must be set to `all`" in capsys.readouterr().err


@pytest.mark.parametrize(("given", "window"), [([], "3600 seconds"), (["--dedupe-window-s", "86400"], "86400 seconds")])
def test_the_replay_jobs_dedupe_window_is_the_one_given(given: list[str], window: str) -> None:
    """A nack seen again once Spark has forgotten the first (a window or two later) is replayed again while its
    record's watermark is held back (a commit job stopped): an operator who keeps one stopped that long lengthens it."""
    args = cli.build_parser().parse_args(["spark", "replay", "--checkpoint", "/x", "--spout", "s", *given])
    config = ServiceConfig(bootstrap_servers="127.0.0.1:1")
    source = commit_job.OutcomeSource(config.client(), (config.outcome_topic("s"),))
    settings = spark_cli._settings(args, config, source, {})
    assert isinstance(settings, ReplayJobSettings) and settings.dedupe_window == window


def test_output_cut_short_by_its_reader_is_no_error_message(tmp_path: Path) -> None:
    """`acker replay ... | head -1`: the rest of the output has nowhere to go; said as "acker: Broken pipe" before."""
    lines = tmp_path / "m.jsonl"
    trees = (f'{{"type":"init","anchor":{i},"value":3,"spout":"s","msg_id":"m{i}"}}\n{{"type":"ack","anchor":{i},'
             f'"value":3}}\n' for i in range(1, 5001))  # fmt: skip
    lines.write_text("".join(trees))  # 5,000 outcome lines: more than a pipe holds
    command = f'"{sys.executable}" -m acker.cli replay --buckets 2 "{lines}" | head -c 0; exit ${{PIPESTATUS[0]}}'
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (1, "")  # the replay's own status (1, as Python's documentation says)


def test_python_dash_m_acker_is_the_acker_command() -> None:
    """For an environment whose scripts directory is not on the PATH; it said "No module named acker.__main__"."""
    line = '{"type":"init","anchor":5,"spout":"s","msg_id":"m","value":3}\n{"type":"ack","anchor":5,"value":3}\n'
    done = subprocess.run([sys.executable, "-m", "acker", "replay", "-"], input=line, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('{"outcome":"ack"')


def test_ctrl_c_is_one_line_and_the_process_dies_of_sigint(tmp_path: Path) -> None:
    """A traceback before; then an exit status of 130, which a shell's loop takes for a handled signal and goes on."""
    process = subprocess.Popen(
        [sys.executable, "-m", "acker.cli", "replay", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(
        '{"type":"init","anchor":5,"spout":"s","msg_id":"m","value":3}\n{"type":"ack","anchor":5,"value":3}\n'
    )
    process.stdin.flush()
    # Its outcome printed: the command is past its start-up, reading its input (3 s of sleep were not always enough:
    # a loaded machine still imported, and the signal's traceback came from the import).
    assert process.stdout.readline().startswith('{"outcome":"ack"')
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT, err
    assert err.strip().endswith("acker: interrupted") and "Traceback" not in err


def test_the_servers_named_in_an_error_are_read_without_saying_ignored_settings_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning "ignored: ACKER_TIMOUT_S" came twice when a command failed: its error loaded the settings again."""
    monkeypatch.setenv("ACKER_TIMOUT_S", "5")
    args = cli.build_parser().parse_args(["status", "--bootstrap-servers", "h:9092"])
    with caplog.at_level(logging.WARNING, logger="acker.config"):
        assert cli._servers(args, cli._settings(args)) == "h:9092"
    assert not caplog.records and not logging.getLogger("acker.config").disabled


def test_a_wordcount_prefix_that_cannot_name_a_topic_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """It was written to, and Kafka's TOPIC_EXCEPTION came back for each sentence."""
    assert cli.main(["wordcount", "produce", "--prefix", "bad topic", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "acker: --prefix 'bad topic': 'bad topic.sentences' cannot name a Kafka topic" in capsys.readouterr().err


@pytest.mark.parametrize("stage", ["topics", "produce", "spout", "split", "count", "run"])
def test_a_wordcount_prefix_too_long_for_a_spouts_name_is_refused_by_every_stage(
    stage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spout is named after its source topic, ``<prefix>.sentences``: a prefix that topic's name takes, but not
    a spout's name (200 characters), was refused by the spout alone, once the topics were made and the bolts
    started."""
    prefix = "p" * 195  # p....sentences is 205 characters
    assert cli.main(["wordcount", stage, "--prefix", prefix, "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "(205 characters) and a spout's name may have 200" in capsys.readouterr().err


def test_wordcount_topics_refuses_a_prefix_whose_spouts_outcome_topic_would_be_too_long(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A spout's name of 200 characters or less, under an outcome prefix that takes its topic past Kafka's 249."""
    argv = ["wordcount", "topics", "--prefix", "p" * 180, "--outcome-prefix", "o" * 80, "--bootstrap-servers", "h:1"]
    assert cli.main(argv) == 2
    assert "its topics' names would pass Kafka's 249 characters" in capsys.readouterr().err


def test_a_reading_command_lists_the_settings_it_uses_and_takes_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    """`acker status --help` listed all the service's settings (--buckets, --tracker-threads, --metrics-port, ...);
    one list of settings must still serve every command."""
    for command, used in (
        (["status"], "--status-topic"),
        (["dlq", "list"], "--replay-dlq-topic"),
        (["spark", "commit"], "--outcome-prefix"),
        (["wordcount", "split"], "--ack-linger-ms"),
        (["wordcount", "produce"], "--bootstrap-servers"),
        (["reach", "step", "0"], "--replication-factor"),
        (["drpc", "call", "reach", "u"], "--bootstrap-servers"),
    ):
        with pytest.raises(SystemExit):
            cli.main([*command, "--help"])
        out = capsys.readouterr().out
        assert used in out and "--bootstrap-servers" in out and "--kafka" in out and "--tracker-threads" not in out
        # A bolt reads the message timeout (how long it passes over inputs read again after a partition was lost),
        # the commit job too (how long a watermark waits at one offset before it is said stuck).
        assert ("--buckets" in out) == (command[:2] in (["wordcount", "split"], ["spark", "commit"]))
        required = ["--checkpoint", "x"] if command[0] == "spark" else []
        args = cli.build_parser().parse_args([*command, *required, "--buckets", "4", "--tracker-threads", "1"])
        assert (args.buckets, args.tracker_threads) == ("4", "1")


def test_a_spouts_help_lists_what_a_spout_reads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["wordcount", "spout", "--help"])
    text = capsys.readouterr().out
    assert "--timeout-s" in text and "--replay-prefix" in text and "--high-water" not in text


def test_wordcount_run_passes_a_prefix_that_begins_with_a_dash_to_its_stages() -> None:
    """Passed as a separate argument, ``-a`` was taken by each stage for an option: every stage exited with 2, once
    the topics were made and the sentences written."""
    command, _ = wordcount_cli.stage_command(ServiceConfig(), "-a", "split")
    args = cli.build_parser().parse_args(command[command.index("wordcount") :])
    assert args.prefix == "-a"


def test_a_crash_marker_in_no_directory_is_refused_and_never_fails_every_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The marker that could not be made raised in the crash generator, which ended it: every later input raised
    StopIteration, and was failed, replayed, and dead-lettered."""
    assert cli.main(["wordcount", "split", "--bootstrap-servers", "127.0.0.1:1", "--crash-marker", "/no/such/x"]) == 2
    assert "--crash-marker '/no/such/x': no directory '/no/such'" in capsys.readouterr().err
    crash = _crasher(0, "/no/such/x")
    for _ in range(3):  # no crash, and no end
        next(crash)


def test_reach_run_asks_whether_kafka_answers_before_making_its_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unanswered, each topic's creation failed after 30 s "waiting for controller", said for 13 topics at once."""
    made: list[object] = []

    def no_answer(*_: object) -> None:
        raise clients.KafkaClientError("asking for metadata", None, " (no answer)")

    monkeypatch.setattr(reach, "answering", no_answer)
    monkeypatch.setattr(reach, "create_chain_topics", lambda *args: made.append(args))
    assert cli.main(["reach", "run", "--bootstrap-servers", "127.0.0.1:1"]) != 0
    assert made == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["--port", "70000"], "--port: must be below 65536"), (["--partitions", "0"], "--partitions: must be at least 1")],
)
def test_the_local_brokers_numbers_out_of_range_are_a_usage_error(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A traceback before (an OverflowError from bind, a ValueError from the properties)."""
    with pytest.raises(SystemExit) as stopped:
        local_broker.main(argv)
    assert stopped.value.code == 2 and said in capsys.readouterr().err


def test_a_reach_step_says_its_counts_at_info_unless_run_by_reach_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its counts when it stops and its late drops are INFO lines: a step run alone (warnings only) said neither;
    `reach run` keeps its steps to warnings, in the terminal it shares with them."""
    assert cli.build_parser().parse_args(["reach", "step", "0"]).log_level == "INFO"
    started: list[list[str]] = []

    class _Started:
        def __init__(self, argv: list[str], **_kwargs: Any) -> None:
            started.append(argv)

        def poll(self) -> int | None:
            return None

        def send_signal(self, _signal: int) -> None:
            pass

        def wait(self, _timeout_s: float) -> int:
            return 0

    monkeypatch.setattr(reach, "answering", lambda *_: None)
    monkeypatch.setattr(reach, "create_chain_topics", lambda *_args: None)
    monkeypatch.setattr(reach, "partition_count", lambda *_args: 3)
    monkeypatch.setattr("subprocess.Popen", _Started)
    monkeypatch.setattr(reach, "DrpcClient", None)  # stops the run once the steps are started
    with pytest.raises(TypeError):
        reach._cmd_run(cli.build_parser().parse_args(["reach", "run"]))
    assert started and all(argv[-2:] == ["--log-level", "WARNING"] for argv in started)


def test_a_query_stopped_by_its_batch_function_is_said_in_the_line_that_function_raised() -> None:
    """Printed whole, Spark's error was the Python traceback, then the query's state, plans and the outcome schema."""
    stopped = (
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        '  File "spark_jobs/replay_job.py", line 447, in _publish_part\n'
        "cimpl.KafkaException: KafkaError{code=UNKNOWN_TOPIC_OR_PART}\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "spark_jobs/replay_job.py", line 482, in _raise_if_deleted\n'
        "acker.errors.AckerError: topic rp.sp was deleted while the replay job ran\n\n"
        "=== Streaming Query ===\nIdentifier: acker-replay\n\nLogical Plan:\n~WriteToMicroBatchDataSourceV1\n"
    )
    assert query_said(stopped) == "topic rp.sp was deleted while the replay job ran"
    assert query_said(stopped.replace("acker.errors.AckerError", "ValueError")).startswith("ValueError: topic")
    assert query_said("[STREAM_FAILED] Kafka went away\n\tat org.apache...\n") == "[STREAM_FAILED] Kafka went away"
    assert query_said("") == "str"
