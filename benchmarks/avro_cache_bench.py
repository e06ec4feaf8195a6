"""Spark jobs' JVM memory: what decoding outcome records leaves behind, micro-batch after micro-batch, with Avro's fast
reader on (the baseline: Avro's default, as the jobs ran until 2026-12-07) and off (`spark_jobs.session`, as they run
now).

Run: ``.venv/bin/python -m benchmarks.avro_cache_bench [--quick]`` (local Spark on ``local[2]``; no broker). Each way
runs in a process of its own (one JVM each: the reader is chosen in a JVM-wide object): it decodes a small DataFrame
of outcome records with the jobs' own decoder (`spark_jobs.outcomes.decoded`) in ``--batches`` jobs, each of which
parses the schema again as a micro-batch's tasks do, and prints the driver JVM's live heap after a full collection
before and after, the readers Avro holds then (``jcmd GC.class_histogram``, when the JDK has it) and the time per
batch. The ratio is the time's to the baseline's. Spark's own bounded histories (of SQL executions, of jobs) grow the
heap in either way at first.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from typing import Any

from acker.wire import encode_outcome_rows

_READERS = re.compile(r"^\s*\d+:\s+(\d+)\s+\d+\s+org\.apache\.avro\.io\.FastReaderBuilder\$RecordReader\s*$", re.M)


def _live_heap_mib(jvm: Any) -> float:
    runtime = jvm.java.lang.Runtime.getRuntime()
    for _ in range(3):  # a full collection asked for, then what is still reachable
        jvm.java.lang.System.gc()
        time.sleep(0.2)
    return float(runtime.totalMemory() - runtime.freeMemory()) / 2**20


def _readers_held(jvm: Any) -> int | None:
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    pid = str(jvm.java.lang.ProcessHandle.current().pid())
    histogram = subprocess.run([jcmd, pid, "GC.class_histogram"], capture_output=True, text=True, timeout=120,
                               check=True).stdout  # fmt: skip
    found = _READERS.search(histogram)
    return int(found[1]) if found else 0


def _one_way(fast: bool, batches: int, master: str) -> dict[str, Any]:
    """In this process: the jobs' session, the fast reader as ``fast`` says, ``batches`` decodes."""
    from spark_jobs import outcomes  # noqa: PLC0415 # pyspark imported by the child only
    from spark_jobs.session import spark_session, stop  # noqa: PLC0415

    spark = spark_session("acker-avro-cache-bench", master)
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.apache.avro.generic.GenericData.get().setFastReaderEnabled(fast)
        rows = [("ACK", anchor, f"wc.sentences/0/{anchor}", 3) for anchor in range(1, 101)]
        record = encode_outcome_rows("sentences", rows)
        frame = spark.createDataFrame([(bytearray(record),)] * 8, "value binary").persist()
        decode = frame.select(outcomes.decoded(frame).alias("o"))
        decode.collect()  # warm-up: the plan compiled, the workers started
        before = _live_heap_mib(jvm)
        started = time.perf_counter()
        for _ in range(batches):
            decoded = decode.collect()
            assert len(decoded) == 8 and len(decoded[0].o.anchors) == 100
        seconds = time.perf_counter() - started
        after = _live_heap_mib(jvm)
        return {"before": before, "after": after, "readers": _readers_held(jvm), "ms_a_batch": 1000 * seconds / batches}
    finally:
        stop(spark)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, default=None, help="micro-batches decoded [1,000; quick 200]")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--way", choices=["fast", "other"], help=argparse.SUPPRESS)  # a child's
    args = parser.parse_args()
    batches = args.batches or (200 if args.quick else 1000)
    if args.way is not None:
        print(json.dumps(_one_way(args.way == "fast", batches, args.master)))
        return
    measured = {}
    for way in ("fast", "other"):
        child = [sys.executable, "-m", "benchmarks.avro_cache_bench", "--way", way, "--batches", str(batches),
                 "--master", args.master]  # fmt: skip
        output = subprocess.run(child, capture_output=True, text=True, check=True).stdout
        measured[way] = json.loads(output.strip().splitlines()[-1])
    base, now = measured["fast"], measured["other"]
    grown = {way: m["after"] - m["before"] for way, m in measured.items()}

    def readers(m: dict[str, Any]) -> str:
        return "no jcmd" if m["readers"] is None else f"{m['readers']:,}"

    print(f"\nworkload: {batches:,} micro-batches decoding 8 outcome records of 100 outcomes; Spark {args.master}")
    print("| Avro reader | live heap before, MiB | after | grown a batch, KiB | readers held | ms a batch | "
          "ratio (time) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, m, way in (("fast, cached (baseline)", base, "fast"), ("the other (the jobs')", now, "other")):
        print(f"| {name} | {m['before']:.1f} | {m['after']:.1f} | {1024 * grown[way] / batches:.1f} | {readers(m)} | "
              f"{m['ms_a_batch']:.1f} | {m['ms_a_batch'] / base['ms_a_batch']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
