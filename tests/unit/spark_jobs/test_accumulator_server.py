"""pyspark's accumulator server, the real one (its socket server, without a JVM), as a Spark job's process has it."""

from __future__ import annotations

import logging
import socket
import time
from types import SimpleNamespace

import pytest
from pyspark.accumulators import _start_update_server

from spark_jobs.session import _quiet_accumulator_server


def test_a_strangers_connection_to_the_accumulator_server_is_one_debug_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """pyspark's accumulator server printed a 20-line traceback to stderr for bytes that are not its token: a Kafka
    client retrying a broker that had had its port filled a job's stderr with a UnicodeDecodeError. The server goes
    on taking connections (one at a time: until Spark's own, which it serves from then on)."""
    token = "t" * 32
    server = _start_update_server(token, False)  # TCP, as a job's (its Unix socket mode is off by default)
    try:
        _quiet_accumulator_server(SimpleNamespace(_accumulatorServer=server))  # type: ignore[arg-type]
        caplog.set_level(logging.DEBUG, logger="spark_jobs.session")
        address = server.server_address
        assert isinstance(address, tuple)  # a TCP server's (host, port)
        host, port = address[:2]
        for _ in range(2):
            with socket.create_connection((str(host), port), timeout=30) as stranger:
                stranger.sendall(b"\xff" * len(token))
                assert stranger.recv(1) == b""  # closed by the server once it gave up on it
        deadline = time.monotonic() + 10
        while len(caplog.records) < 2 and time.monotonic() < deadline:  # logged after the close
            time.sleep(0.01)
        dropped = [r.getMessage() for r in caplog.records]
        assert len(dropped) == 2 and all("accumulator server dropped a connection" in m for m in dropped), dropped
        assert "UnicodeDecodeError" in dropped[0]
        assert "Traceback" not in capsys.readouterr().err
    finally:
        server.shutdown()
