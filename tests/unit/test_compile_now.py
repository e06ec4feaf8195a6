"""The service compiles every loop it runs before it joins its group (`acker.service.compile_now`): deciding real
traffic afterwards compiles nothing more, for no argument layout. Checked in a fresh interpreter, where nothing else
compiled anything before (numba's compiled signatures are per process)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time

import pytest

from acker import service

_SCRIPT = """
import numpy as np
from numba.core.registry import CPUDispatcher

import acker.service as service
from acker import avro_longs, wire
from acker.columnar import _kernels
from acker.columnar.block import MessageBlock, RecordSpans
from acker.config import ServiceConfig
from acker.partition import PartitionState
from acker.workload import WorkloadSpec, generate


def compiled():
    return {
        (module.__name__, name, str(signature))
        for module in (_kernels, avro_longs, wire)
        for name, value in vars(module).items()
        if isinstance(value, CPUDispatcher)
        for signature in value.signatures
    }


service.compile_now()
before = compiled()
workload = generate(WorkloadSpec(trees=3000, fail_rate=0.05, drop_rate=0.05, tick_every=4000, spout="s"))
messages = workload.messages
state = PartitionState(0, ServiceConfig().tracker_config(), 1000, 0)
values = [wire.encode_batch(MessageBlock.from_messages(messages[i : i + 700])) for i in range(0, len(messages), 700)]
blocks = [wire.parse_batch(value) for value in values]
for start, end in service.record_groups([len(block) for block in blocks]):
    group = blocks[start:end]
    for block in group:
        wire.check_block(block, 0, 1)
    block = MessageBlock.concat(group)
    wire.check_block(block, 0, 1)
    records = RecordSpans.of([len(b) for b in group], list(range(start, end)), [1] * len(group))
    outcomes = state.apply_records(block, records)
    assert len(outcomes)
    service.outcome_records(0, records, outcomes)
state.recovery_offset()
new = sorted(compiled() - before)
print("NEW", new)
"""


def test_deciding_traffic_after_the_warm_up_compiles_nothing() -> None:
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "NEW []" in run.stdout, run.stdout[-3000:]


def test_a_slow_compile_says_what_it_does_and_how_long_it_took(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A new installation's first `acker run` compiled for 8 minutes on a loaded host, with nothing said between its
    configuration line and its assignment: it looked hung, and was killed."""
    monkeypatch.setattr(service, "COMPILING_SAID_AFTER_S", 0.05)
    monkeypatch.setattr(service, "_compile_all", lambda: time.sleep(0.5))
    with caplog.at_level(logging.INFO, logger="acker.service"):
        service.compile_now()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and said[0].startswith("compiling the tracker's loops (numba)")
    assert re.fullmatch(r"the tracker's loops ready in [01] s", said[1])  # half a second, rounded
    assert {r.levelname for r in caplog.records} == {"WARNING"}  # the runners start `acker run` at WARNING


def test_a_compile_loaded_from_the_cache_says_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(service, "_compile_all", lambda: None)
    with caplog.at_level(logging.INFO, logger="acker.service"):
        service.compile_now()
    assert caplog.records == []
