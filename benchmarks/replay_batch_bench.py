"""Replay job benchmark: one micro-batch of many nacks brought to the driver, whole (the baseline, as the job did
until 2026-11-29) and in key order a part at a time (`spark_jobs.replay_job.in_order`, as the job reads them now).

Run: ``.venv/bin/python -m benchmarks.replay_batch_bench [--quick]`` (local Spark on ``local[2]``; no broker: the
nacks are a DataFrame of the job's nack columns, ``--nacks`` of them, as full outcome records of a mass timeout make
them). For each way, the driver's Python heap at its peak (tracemalloc) while every row is taken, its time, and the
rows per second; the ratios to the baseline. The driver's publication of each part (the replays, one transaction a
part) is not measured: it is the same either way.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.replay_job import _key, in_order
from spark_jobs.session import spark_session, stop


def _nacks(spark: SparkSession, count: int) -> DataFrame:
    """``count`` TIMEOUT nacks of 8 source partitions, in the job's nack columns, in no order."""
    n = F.col("id")
    return (
        spark.range(count, numPartitions=4)
        .select(
            F.lit("sentences").alias("spout"),
            F.concat(
                F.lit("wc.sentences/"), (n % 8).cast("string"), F.lit("/"), (n * 7919 % count).cast("string")
            ).alias("msg_id"),
            F.lit("TIMEOUT").alias("reason"),
            F.lit("wc.sentences").alias("topic"),
            (n % 8).cast("int").alias("partition"),
            (n * 7919 % count).alias("offset"),
            F.current_timestamp().alias("timestamp"),
            F.lit("acker.outcomes.sentences").alias("outcome_topic"),
            (n % 4).cast("int").alias("outcome_partition"),
            F.lit(None).cast("string").alias("detail"),
        )
        .persist()
    )


def _whole(batch: DataFrame, _size: int) -> Iterable[Any]:
    return iter(sorted(batch.collect(), key=_key))


def _measure(take: Callable[[DataFrame, int], Iterable[Any]], batch: DataFrame, size: int) -> tuple[float, int, int]:
    """Seconds to take every row, the Python heap's peak meanwhile (bytes), and the rows taken (in key order)."""
    tracemalloc.start()
    started = time.perf_counter()
    rows, before = 0, ("", "")
    for row in take(batch, size):  # as `publish` reads them: one at a time, a part kept at most
        key = _key(row)
        assert key > before, "out of order"
        before, rows = key, rows + 1
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nacks", type=int, default=None, help="nacks in the batch [1,000,000; quick 200,000]")
    parser.add_argument("--part", type=int, default=20_000, help="nacks a part (--nacks-per-transaction) [20,000]")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    count = args.nacks or (200_000 if args.quick else 1_000_000)
    spark = spark_session("acker-replay-batch-bench", args.master)
    try:
        batch = _nacks(spark, count)
        batch.count()  # computed and cached before either is timed
        _measure(in_order, batch, args.part)  # warm-up: the plans compiled, the workers started
        measured = {name: _measure(take, batch, args.part) for name, take in (("whole", _whole), ("parts", in_order))}
        batch.unpersist()
    finally:
        stop(spark)
    (whole_s, whole_peak, whole_rows), (parts_s, parts_peak, parts_rows) = measured["whole"], measured["parts"]
    assert whole_rows == parts_rows == count, (whole_rows, parts_rows, count)
    print(f"\nworkload: one micro-batch of {count:,} nacks, parts of {args.part:,}; Spark {args.master}")
    print("| way | seconds | nacks/s | driver Python heap, peak | ratio (time) | ratio (heap) |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| collected whole, sorted (baseline) | {whole_s:.2f} | {count / whole_s:,.0f} | "
          f"{whole_peak / 2**20:,.0f} MiB | 1.00 | 1.00 |")  # fmt: skip
    print(f"| in key order, a part at a time (`in_order`) | {parts_s:.2f} | {count / parts_s:,.0f} | "
          f"{parts_peak / 2**20:,.0f} MiB | {parts_s / whole_s:.2f} | {parts_peak / whole_peak:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
