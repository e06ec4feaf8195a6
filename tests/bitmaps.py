"""Rows of done offsets as the commit job's micro-batches give them to its driver (`commit_job.done_bitmaps`),
made without Spark for tests of what the driver does with them. The layout (bit i of bucket b is offset
b * BUCKET_BITS + i, least significant bit first) is Spark's, checked against Spark itself in the integration tests."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from spark_jobs.commit_job import BUCKET_BITS


def bitmap_rows(spout: str, topic: str, partition: int, offsets: list[int]) -> list[SimpleNamespace]:
    rows = []
    for bucket in sorted({o // BUCKET_BITS for o in offsets}):
        bits = np.zeros(BUCKET_BITS, np.uint8)
        bits[[o - bucket * BUCKET_BITS for o in offsets if o // BUCKET_BITS == bucket]] = 1
        packed = np.packbits(bits, bitorder="little").tobytes()
        rows.append(SimpleNamespace(spout=spout, topic=topic, partition=partition, bucket=bucket, bits=packed))
    return rows
