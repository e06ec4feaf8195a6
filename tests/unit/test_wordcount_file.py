"""`acker wordcount produce|run --file`: sentences are bytes, and a file that cannot be read is one line of error
(exit status 2) before anything is made or started."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest
from confluent_kafka import KafkaError

from acker import cli
from acker.config import ServiceConfig
from acker.examples import wordcount_cli


def test_a_file_of_sentences_that_are_not_utf8_is_written_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read as UTF-8 text, a Latin-1 line stopped `produce` with a UnicodeDecodeError's traceback."""
    path = tmp_path / "sentences.txt"
    path.write_bytes(b"caf\xe9 au lait\n\n  \nthe cow\r\n\xff\xfe jumped\n")
    written: list[bytes] = []

    def produce(_config: ServiceConfig, topic: str, lines: list[bytes]) -> list[str]:
        written.extend(lines)
        return [f"{topic}/0/{i}" for i in range(len(lines))]

    monkeypatch.setattr(wordcount_cli, "produce", produce)
    monkeypatch.setattr(wordcount_cli, "answering", lambda *_: None)  # asked first: it answers
    monkeypatch.setattr(wordcount_cli, "partition_count", lambda *_: 4)  # and the topic is there
    assert cli.main(["wordcount", "produce", "--file", str(path), "--bootstrap-servers", "127.0.0.1:1"]) == 0
    assert written == [b"caf\xe9 au lait", b"the cow", b"\xff\xfe jumped"]
    assert capsys.readouterr().out == "3 sentences written to wc.sentences\n"


@pytest.mark.parametrize("command", ["produce", "run"])
def test_a_file_that_cannot_be_read_is_one_line_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`run` read the file only once its topics were made and every stage had started, and stopped them all."""

    def nothing_before_the_file(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError("started before the file was read")

    for name in ("cmd_topics", "create_and_report", "produce", "Stages", "PipelineStages"):
        monkeypatch.setattr(wordcount_cli, name, nothing_before_the_file)
    missing = tmp_path / "no-such-file.txt"
    argv = ["wordcount", command, "--file", str(missing), "--bootstrap-servers", "127.0.0.1:1"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"acker: --file {missing}: No such file or directory\n"
    assert cli.main([*argv[:3], str(tmp_path), *argv[4:]]) == 2  # a directory
    assert capsys.readouterr().err == f"acker: --file {tmp_path}: Is a directory\n"


class _Refusing:
    """A producer whose every delivery is reported failed at the flush."""

    def __init__(self, _config: object) -> None:
        self.reports: list[Any] = []

    def produce(self, *_args: object, on_delivery: Any, **_kwargs: object) -> None:
        self.reports.append(on_delivery)

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        for report in self.reports:
            report(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), None)
        return 0


def test_a_sentence_kafka_refuses_is_said_as_a_kafka_error_with_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Raised from the delivery callback as `SystemExit`, it ended the command with status 1 (a run's "some sentences
    undecided") and the error's repr, past the CLI's own handling."""
    monkeypatch.setattr(wordcount_cli, "Producer", _Refusing)
    monkeypatch.setattr(wordcount_cli, "answering", lambda *_: None)
    monkeypatch.setattr(wordcount_cli, "partition_count", lambda *_: 4)
    assert cli.main(["wordcount", "produce", "--sentences", "2", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("acker: Kafka client: Broker: Topic authorization failed"), err
