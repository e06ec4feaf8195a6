"""Outcome-topic records as Spark rows: pure transforms over DataFrames with Kafka's columns.

`outcome_rows` turns each outcome record (the prefix ``AKO\\x01`` then schemas/outcome_batch.avsc in Avro) into one
row per outcome, with the message id split back into the source record's coordinates, and the reason a failed tree
was given, where the record's ``acker.fail-reasons`` header has one (`acker.fail_reasons`). `malformed` keeps the
records that are not valid outcome records, with the reason, for the dead-letter topic: the jobs never stop on
one, and never misread one.
"""

from __future__ import annotations

import operator
from functools import reduce
from importlib.resources import files

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from acker import fail_reasons
from acker.dlq import DLQ_KEPT_BYTES, DLQ_KEY_TRUNCATED, DLQ_TRUNCATED
from acker.retries import ACKER_DLQ_REASON, DEAD_LETTERED, OVERLOAD, REPLAYED
from acker.wire import MAGIC, OUTCOMES, SPOUT_NAME, VERSION

OUTCOME_SCHEMA = files("acker.schemas").joinpath("outcome_batch.avsc").read_text("utf-8")
PREFIX = MAGIC + OUTCOMES + bytes([VERSION])
ACK, FAILED, TIMEOUT = "ACK", "FAILED", "TIMEOUT"
NACKS = (FAILED, TIMEOUT, OVERLOAD)
DONE = (ACK, REPLAYED, DEAD_LETTERED)  # the source offset needs nothing more: processed, or handed on


def decoded(raw: DataFrame) -> Column:
    """The decoded record, or null when it is not a valid one: a wrong prefix, or a `refusal`.

    The record is decoded once: the decoder appears once in the expression (the checks run in a lambda over a
    one-element array), so the optimizer has no copies of it to evaluate when it pushes a filter down."""
    body = F.expr("substring(value, 5, length(value) - 4)")
    right_prefix = F.substring("value", 1, 4) == F.lit(PREFIX)
    decoded = from_avro(body, OUTCOME_SCHEMA, {"mode": "PERMISSIVE"})
    return F.when(right_prefix, F.try_element_at(F.filter(F.array(decoded), lambda o: refusal(o).isNull()), F.lit(1)))


def refusal(o: Column) -> Column:
    """Why a decoded outcome record ``o`` is not a valid one, in the reason the spouts' reader gives
    (`acker.wire.decode_outcomes`); null when it is valid. The jobs and the spouts take the same outcomes:

    - ``undecodable``: not Avro of the schema (null, or a struct of nulls: ``from_avro``'s permissive mode), or a
      string that is not UTF-8 (Avro's Java reader does not check; fastavro, the spouts', does);
    - ``inconsistent-columns``: columns of different lengths (Spark's Avro reader can decode a cut record into
      shorter arrays), or a source index outside its sources (which would fail every run of the batch or, negative,
      name another source);
    - ``bad-column``: an offset below -1, "no offset" (a message id would be misread as its source);
    - ``bad-spout``: a spout name that cannot name a topic, `valid_spout` (the replay job would ask Kafka about its
      replay topic, refused, at every run)."""
    n = F.size(o.getField("outcomes"))
    sources = o.getField("sources")
    same_length = reduce(operator.and_, (F.size(o.getField(c)) == n for c in _COLUMNS))
    # array_min and array_max, not a lambda over each item (a third of the decoding's time); null for an empty
    # array: nothing to check (a record not decoded is refused first, `utf8`)
    index = o.getField("source_index")
    in_range = F.coalesce((F.array_min(index) >= 0) & (F.array_max(index) < F.size(sources)), F.lit(True))
    offsets = F.coalesce(F.array_min(o.getField("offsets")) >= -1, F.lit(True))
    utf8 = F.is_valid_utf8(o.getField("spout")) & F.forall(sources, F.is_valid_utf8)

    def fails(holds: Column) -> Column:
        return F.coalesce(~holds, F.lit(True))  # a check that cannot tell (a null field) refuses

    return (
        F.when(fails(utf8), F.lit("undecodable"))
        .when(fails(same_length & in_range), F.lit("inconsistent-columns"))
        .when(fails(offsets), F.lit("bad-column"))
        .when(fails(valid_spout(o)), F.lit("bad-spout"))
    )


_COLUMNS = ("anchors", "source_index", "offsets", "latency_ms")  # as many items as ``outcomes``


def valid_spout(o: Column) -> Column:
    """Whether a decoded record's spout can name its topics, as `acker.wire.spout_name_valid` says (\\z: Java's $ also
    matches before a last line break)."""
    return F.coalesce(o.getField("spout").rlike(f"^{SPOUT_NAME}\\z"), F.lit(False))


# A message id's source ``<topic>/<partition>`` (its offset apart): the source of a record's coordinates, with a
# topic name Kafka could have (its legal characters, at most 249 of them). Any other id a spout gives (a user's
# ``files/2024/06/1/7``) is not coordinates: asked about topic ``files/2024/06``, Kafka refuses the question, and a
# job would fail its micro-batch at every restart.
# Not "." nor "..", which Kafka refuses too; \z: Java's $ also matches before a last line break.
COORDINATES = r"^(?!\.\.?/)([A-Za-z0-9._-]{1,249})/([0-9]+)\z"


def source_partition(source: Column) -> tuple[Column, Column]:
    """The topic and partition of a source ``<topic>/<partition>`` (check it with ``rlike(COORDINATES)`` first)."""
    # try_cast: a partition number past an int is not coordinates (null), not an error that fails every run
    return F.regexp_extract(source, COORDINATES, 1), F.regexp_extract(source, COORDINATES, 2).try_cast("int")


_REASONS = "map<string,string>"
_MAX_CHARS = fail_reasons.REASON_MAX_CHARS


def fail_reasons_of(raw: DataFrame) -> Column:
    """The reasons of a record's ``acker.fail-reasons`` header, a map from message id to reason; null without the
    header (or the ``headers`` column: a source read without them), or where it is not a JSON object of strings."""
    if "headers" not in raw.columns:
        return F.lit(None).cast(_REASONS)
    found = F.filter("headers", lambda h: h.getField("key") == F.lit(fail_reasons.HEADER))
    value = F.try_element_at(found, F.lit(1)).getField("value").cast("string")
    return F.from_json(value, _REASONS)


def outcome_rows(raw: DataFrame) -> DataFrame:
    """One row per outcome: ``spout, outcome, anchor, msg_id, source_topic, source_partition, source_offset,
    latency_ms, acker_partition, timestamp, outcome_topic, outcome_partition, detail`` (the outcome record's timestamp,
    topic and partition; why the tree failed, where a FAILED outcome has a reason). ``source_*`` are null for a
    message id that is not record coordinates ``topic/partition/offset``."""
    # an invalid record is null: explodes into nothing
    o = raw.select("timestamp", "topic", "partition", decoded(raw).alias("o"), fail_reasons_of(raw).alias("reasons"))
    exploded = o.select(
        "timestamp",
        "topic",
        F.col("partition").alias("outcome_partition"),
        "reasons",
        F.col("o.spout").alias("spout"),
        F.col("o.acker_partition").alias("acker_partition"),
        F.col("o.sources").alias("sources"),
        F.col("o.anchors").alias("anchors"),
        F.col("o.source_index").alias("source_index"),
        F.col("o.offsets").alias("offsets"),
        F.col("o.latency_ms").alias("latencies"),
        F.posexplode("o.outcomes").alias("i", "outcome"),
    )
    at = F.col("i") + 1
    source = F.element_at("sources", F.element_at("source_index", at) + 1)
    offset = F.element_at("offsets", at)
    topic, partition = source_partition(source)
    is_coordinates = (offset >= 0) & source.rlike(COORDINATES) & partition.isNotNull()
    msg_id = F.when(offset >= 0, F.concat_ws("/", source, offset.cast("string"))).otherwise(source)
    return exploded.select(
        "spout",
        "outcome",
        F.element_at("anchors", at).alias("anchor"),
        msg_id.alias("msg_id"),
        F.when(is_coordinates, topic).alias("source_topic"),
        F.when(is_coordinates, partition).alias("source_partition"),
        F.when(is_coordinates, offset).alias("source_offset"),
        F.element_at("latencies", at).alias("latency_ms"),
        "acker_partition",
        "timestamp",
        F.col("topic").alias("outcome_topic"),
        "outcome_partition",
        # cut as the writers cut it: a reason from another writer may be any size
        F.when(
            F.col("outcome") == F.lit(FAILED), F.substring(F.try_element_at("reasons", msg_id), 1, _MAX_CHARS)
        ).alias("detail"),
    )


def malformed(raw: DataFrame, whole_max: int, kept: int = DLQ_KEPT_BYTES) -> DataFrame:
    """The records that are not valid outcome records, ready for Spark's Kafka sink (``key``, ``value``,
    ``headers``): the bytes as they were, with ``acker.dlq.reason`` and the record's coordinates. One whose value
    and key are more than ``whole_max`` bytes together is cut to ``kept`` bytes of each, as `acker.dlq.cut_copy` cuts
    (``acker.dlq.truncated``, ``acker.dlq.key-truncated`` give the whole lengths; the coordinates say where the whole
    record lies): the sink's producer refused a copy over its limit, which stopped the job at every restart on it."""
    # The reasons the acker's own reader gives (`acker.wire`): an outcome record of a schema version this job does not
    # know is not a stranger's record, and says which side to upgrade.
    prefix = F.substring("value", 1, 4)
    body = from_avro(F.expr("substring(value, 5, length(value) - 4)"), OUTCOME_SCHEMA, {"mode": "PERMISSIVE"})
    reason = (
        F.when(
            (F.length("value") >= 4) & (F.substring("value", 1, 3) == F.lit(PREFIX[:3])) & (prefix != F.lit(PREFIX)),
            F.lit("unknown-version"),
        )
        .when(prefix != F.lit(PREFIX), F.lit("bad-prefix"))
        .otherwise(F.coalesce(refusal(body), F.lit("undecodable")))  # as the spouts' reader says it
    )
    bad = raw.where(F.col("value").isNull() | decoded(raw).isNull())

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    value_bytes, key_bytes = F.coalesce(F.length("value"), F.lit(0)), F.coalesce(F.length("key"), F.lit(0))
    too_large = value_bytes + key_bytes > F.lit(whole_max)
    cut_value, cut_key = too_large & (value_bytes > F.lit(kept)), too_large & (key_bytes > F.lit(kept))
    return bad.select(
        F.when(cut_key, F.substring("key", 1, kept)).otherwise(F.col("key")).alias("key"),
        F.when(cut_value, F.substring("value", 1, kept)).otherwise(F.col("value")).alias("value"),
        F.array_compact(
            F.array(
                header(ACKER_DLQ_REASON, F.when(F.col("value").isNull(), F.lit("empty")).otherwise(reason)),
                header("acker.dlq.topic", F.col("topic")),
                header("acker.dlq.partition", F.col("partition").cast("string")),
                header("acker.dlq.offset", F.col("offset").cast("string")),
                F.when(cut_value, header(DLQ_TRUNCATED, value_bytes.cast("string"))),
                F.when(cut_key, header(DLQ_KEY_TRUNCATED, key_bytes.cast("string"))),
            )
        ).alias("headers"),
    )
