"""The SparkSession of the jobs, with Spark's Kafka and Avro connectors of pyspark's own version.

pyspark ships neither connector. They are resolved from Maven Central on the first run
(``spark.jars.packages``) into an Ivy cache under the project's cache directory (``$ACKER_CACHE_DIR``, default
``~/.cache/kafka-acker``) and reused afterwards. They are looked up on Maven Central only (and in any
``spark.jars.repositories`` a user adds): Spark's default chain also asks repos.spark-packages.org, whose failures
Ivy reports as a "problems summary" of a first run, and a host behind a proxy waits for. On a cluster, spark-submit's
``--packages`` does the same.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from acker.kafka import lookups
from acker.kafka.local_broker import default_cache_dir
from acker.wire import AVRO_ARRAY_MAX_ITEMS, AVRO_STRING_MAX_BYTES
from spark_jobs.jvm_errors import java_class
from spark_jobs.replay_job import close_publishers
from spark_jobs.stopping import GATEWAY_GONE, INTERRUPTED, interrupting, stopping

log = logging.getLogger("spark_jobs.session")

# How long stopping a query waits for its micro-batch to end after interrupting it. Spark's default (0) waits for ever,
# and a batch inside Python code (the jobs' foreachBatch functions: a Kafka flush, a commit, a broker away) does not
# end when interrupted: a stopping job hung as long as the batch did, past a supervisor's patience (Kubernetes kills
# after 30 s). A batch left running is safe: it runs again when the job starts again (its offsets are in the
# checkpoint, its end is not). Set only when neither --conf nor spark-defaults.conf gives it.
STOP_TIMEOUT = "spark.sql.streaming.stopTimeout"
STOP_TIMEOUT_DEFAULT = "20s"

SPARK_VERSION = pyspark.__version__

SCALA = "2.13"  # pyspark 4 is built for Scala 2.13 only

# The JVM loggers whose level the jobs set: each is a class's name, which releases move (Spark 4.1 moved the
# streaming engine's to ``streaming.runtime``), and a logger named after no class quiets nothing, silently. A test
# checks each against the classes of pyspark's jars.
QUERIES_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
TRIGGER_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"
SCHEDULER_LOGGER = "org.apache.spark.scheduler.DAGScheduler"
TASK_LOGGER = "org.apache.spark.TaskContextImpl"
TASK_SCHEDULER_LOGGER = "org.apache.spark.scheduler.TaskSchedulerImpl"
SHELL_LOGGER = "org.apache.hadoop.util.Shell"  # Hadoop's, in pyspark's jars too
SPARK_LOGGERS = (QUERIES_LOGGER, TRIGGER_LOGGER, SCHEDULER_LOGGER, TASK_LOGGER, TASK_SCHEDULER_LOGGER, SHELL_LOGGER)


def connector_packages() -> list[str]:
    """Maven coordinates of the Kafka source/sink and Avro functions matching this pyspark."""
    return [
        f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{SPARK_VERSION}",
        f"org.apache.spark:spark-avro_{SCALA}:{SPARK_VERSION}",
    ]


# Maven Central alone. Ivy's own cache (under ``spark.jars.ivy``) is consulted before any resolver. Shared by the jobs
# of every process on the host: Ivy locks each artifact while it writes it (by default it takes no lock, and two jobs
# resolving the connectors for the first time could leave a broken jar for every later start), and the jobs' JVMs
# start one at a time (`_resolving_alone`).
_IVY_SETTINGS = """<ivysettings>
  <settings defaultResolver="central"/>
  <caches lockStrategy="artifact-lock-nio"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
"""


def _ivy_settings(ivy: Path) -> str:
    """The settings file's URI (Spark parses the setting as a URI: a path with a space in it would not be one),
    written atomically: jobs starting together share the cache."""
    settings = ivy / "ivysettings.xml"
    if not settings.exists() or settings.read_text() != _IVY_SETTINGS:
        fresh = ivy / f"ivysettings.{os.getpid()}.tmp"
        fresh.write_text(_IVY_SETTINGS)
        os.replace(fresh, settings)
    return settings.as_uri()


@contextmanager
def _resolving_alone(ivy: Path, starting: bool) -> Iterator[None]:
    """Held while this process starts its JVM (``starting``), which resolves the connectors into the Ivy cache the
    jobs of every process on the host share: one start at a time. Ivy's artifact lock did not always keep two first
    starts apart (in a trial, the commit and replay jobs started together on an empty cache): one's download lost its
    ``.jar.part`` file, and its JVM exited ("Java gateway process exited before sending its port number"). A start
    with the cache filled holds it for the JVM's start alone (seconds)."""
    if not starting:
        yield
        return
    with (ivy / "start.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another Spark job on this host to start (the connectors' Ivy cache: %s)", ivy)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file lets the lock go


# Avro's Java reader allocates what a record claims (an array's item count, a string's length) before it reads it:
# one malformed outcome record of 12 bytes claiming 2 billion items ran Spark's JVM out of memory, which kills it
# (PERMISSIVE mode turns exceptions into nulls, not errors), at every restart on the same record, every spout's
# watermark stopped. Avro's own limits bound those claims: a record over them is malformed, dead-lettered (and refused
# by the spouts' reader, `acker.wire.decode_outcomes`). The arrays of an outcome record hold `OUTCOMES_PER_RECORD`
# items at most, and a string is at most a Kafka record.
AVRO_LIMITS = {
    "org.apache.avro.limits.collectionItems.maxLength": str(AVRO_ARRAY_MAX_ITEMS),
    "org.apache.avro.limits.string.maxLength": str(AVRO_STRING_MAX_BYTES),
    "org.apache.avro.limits.bytes.maxLength": str(AVRO_STRING_MAX_BYTES),
}


# Avro's fast reader (on by default since Avro 1.10) keeps a reader per schema object in a cache whose entries never
# go (each reader holds its weak key: AVRO-3524, AVRO-4253), and Spark parses the outcome schema again for the tasks
# of every micro-batch: the jobs' JVMs kept a reader and a schema a decode a batch, for as long as they ran (a 45-minute
# soak, 9,000 sentences a minute: the commit job's live heap +450 MB an hour, under a 1 GB heap). Avro's other reader
# reads the same, from a cache that lets them go (docs/benchmarks.md, "Spark jobs: Avro's reader cache").
AVRO_FAST_READER = "org.apache.avro.fastread"
AVRO_PROPERTIES = {**AVRO_LIMITS, AVRO_FAST_READER: "false"}


def _with_avro_limits(options: str) -> str:
    """JVM options ``options`` with `AVRO_PROPERTIES` added (those it sets already are kept)."""
    added = [f"-D{name}={value}" for name, value in AVRO_PROPERTIES.items() if f"-D{name}=" not in options]
    return " ".join([options, *added]).strip()


def _spark_default(key: str) -> str:
    """``key``'s value in the ``spark-defaults.conf`` of Spark's configuration directory (``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``, else pyspark's own), "" when it has none: a setting given when pyspark starts the JVM
    replaces the file's, which this process's SparkConf does not see."""
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    path = Path(os.environ.get("SPARK_CONF_DIR") or Path(home) / "conf") / "spark-defaults.conf"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return ""
    value = ""
    for line in lines:  # Java's properties format: a key, then "=", ":" or white space, then the value
        found = re.match(r"([^\s=:]+)\s*[=:\s]\s*(.*)", line.strip())
        if found is not None and found[1] == key:
            value = found[2].strip()
    return value


def under_spark_submit() -> bool:
    """Whether this process was started by spark-submit, which starts the JVM first and hands its gateway over."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(app: str, master: str | None = "local[2]", jvm_output: Path | None = None) -> SparkSession:
    """A session for ``app`` (getOrCreate: the jobs of one process share it). ``master`` None: the one spark-submit
    was given (or Spark's default).

    ``jvm_output``: a file that takes everything the Spark JVM prints (Ivy's resolution report, Spark's log lines),
    appended to, for a caller whose terminal shows something else (the demo's live table); by default the JVM prints
    to this process's terminal, as spark-submit does. It applies only to the JVM this call starts.
    """
    logging.getLogger().removeFilter(GATEWAY_GONE)  # a JVM again: its failures are said (`stop`)
    logging.getLogger().addFilter(INTERRUPTED)  # a Ctrl-C is said by the command, without py4j's traceback
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this interpreter's packages
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Its own directory: a cache that Spark's default chain filled names resolvers these settings do not have, and Ivy
    # reports each of them as an error at every start.
    ivy = default_cache_dir() / "ivy-central"
    ivy.mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.app.name": app,
        "spark.jars.packages": ",".join(connector_packages()),
        "spark.jars.ivy": str(ivy),
        "spark.jars.ivySettings": _ivy_settings(ivy),
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # progress bars on stderr, cut into the log lines
        # The jobs are streaming queries, which adaptive query execution does not apply to; left on, Spark warns so
        # at the start of every query.
        "spark.sql.adaptive.enabled": "false",
    }
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else a warning that the host name is a loopback one
        settings |= {"spark.master": master, "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
    elif master is not None:
        settings["spark.master"] = master
    conf = SparkConf().setAll(list(settings.items()))
    if master is not None and not master.startswith("local"):
        # Executors of their own (local mode decodes in the driver, given the limits by `_avro_limits_in_driver`):
        # given the limits, beside the options of spark-defaults.conf, which the setting given here would replace.
        # Under spark-submit (no master given here) this process cannot see what spark-submit was given: its
        # --conf spark.executor.extraJavaOptions takes the limits (README).
        key = "spark.executor.extraJavaOptions"
        conf.set(key, _with_avro_limits(conf.get(key, "") or _spark_default(key)))
    # pyspark's context replaces the SIGINT handler with one that cancels every running job before it raises
    # KeyboardInterrupt: a Ctrl-C then failed the micro-batches in flight, with pages of traces, before the queries
    # could be stopped between two (`stop_queries`). The handler the process had is put back.
    interrupt = signal.getsignal(signal.SIGINT)
    starting = SparkContext._gateway is None and not under_spark_submit()  # this call starts the JVM
    with _resolving_alone(ivy, starting):
        if jvm_output is not None and starting:
            # pyspark's way to start the JVM with its output elsewhere (``popen_kwargs``); the context then uses it.
            jvm_output.parent.mkdir(parents=True, exist_ok=True)
            with jvm_output.open("ab") as output:
                popen = {"stdout": output, "stderr": output}
                gateway = launch_gateway(conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
            SparkContext(conf=conf, gateway=gateway)
        session = SparkSession.builder.config(conf=conf).getOrCreate()
    if interrupt is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupt)
    session.sparkContext.setLogLevel("WARN")
    _quiet_accumulator_server(session.sparkContext)
    _avro_limits_in_driver(session)
    if not session.sparkContext.getConf().contains(STOP_TIMEOUT):  # given by --conf or spark-defaults.conf: theirs
        session.conf.set(STOP_TIMEOUT, STOP_TIMEOUT_DEFAULT)
    # "Current batch is falling behind", at every micro-batch longer than the trigger (the first ones of a job, any
    # on a busy host): the jobs log each micro-batch's work themselves.
    set_log_level(session, TRIGGER_LOGGER, "ERROR")
    return session


def _quiet_accumulator_server(context: SparkContext) -> None:
    """pyspark's accumulator server listens on a local port the system picks (or, when Spark's Unix-socket mode is
    turned on, a Unix socket, which asks no token), and prints a 20-line traceback to stderr for every connection
    that does not open with its token. A job's stderr then held a stranger's: a Kafka
    client still retrying a broker that had this port before (seen in the tests), or a port scan. Such a connection
    is logged on one debug line; Spark's own are not touched. (The server takes one connection at a time, and keeps
    Spark's once it comes: a stranger is read before it, or waits unread.)"""
    server = getattr(context, "_accumulatorServer", None)  # pyspark's attribute, there since its 1.x
    if server is None:
        return

    def refused(_request: object, address: object) -> None:
        error = sys.exc_info()[1]
        log.debug("pyspark's accumulator server dropped a connection from %s: %s: %s", address,
                  type(error).__name__, error)  # fmt: skip

    server.handle_error = refused


def _avro_limits_in_driver(session: SparkSession) -> None:
    """`AVRO_PROPERTIES` in the driver's JVM (local mode decodes there), which was started before (by spark-submit, or
    by pyspark with the user's own options): Avro reads the limits when its first record is read, after this; the fast
    reader is turned off on the shared `GenericData` itself, which reads its property once, whenever it was first
    used. Those the JVM was given are kept."""
    jvm = session.sparkContext._jvm
    assert jvm is not None  # a driver's context
    for name, value in AVRO_PROPERTIES.items():
        if jvm.java.lang.System.getProperty(name) is None:
            jvm.java.lang.System.setProperty(name, value)
            if name == AVRO_FAST_READER:
                jvm.org.apache.avro.generic.GenericData.get().setFastReaderEnabled(False)


def _log4j(session: SparkSession) -> Any:
    """The driver JVM's ``org.apache.logging.log4j`` package."""
    jvm = session.sparkContext._jvm
    assert jvm is not None  # a driver's context
    return jvm.org.apache.logging.log4j


def set_log_level(session: SparkSession, logger: str, level: str) -> None:
    """Set the level of one of the JVM's log4j loggers (``sparkContext.setLogLevel`` sets the root's only)."""
    log4j = _log4j(session)
    log4j.core.config.Configurator.setLevel(logger, log4j.Level.toLevel(level))


def stop_queries(session: SparkSession, queries: Iterable[Any], between_batches_s: float = 5.0) -> None:
    """Stop streaming queries, each between two micro-batches if one comes within ``between_batches_s``.

    Stopping a query interrupts the micro-batch it is running, which then fails (`spark_jobs.stopping` keeps that
    short and quiet). What a batch did is safe either way (it runs again after a restart); waiting for its end only
    spares it the interruption.
    Stopping one also cancels its job group, and Spark 4 warns "Failed to cancel job group" whenever the group has
    no job running, as between micro-batches (apache/spark#45722): that warning is turned off first. So is the query's
    own "terminated with error" and its Java trace (80 lines) for a batch that started after the wait and was
    interrupted: a trigger comes every ``trigger_s`` even with no data (the replay job's watermark moves). And a
    killed task's "Error in TaskCompletionListener ... Block broadcast_0 does not exist" (30 lines), when the stopped
    query's broadcast is gone before the task ends: Spark's race, after the stop returned; a listener's error in a task
    not killed fails that task, which Spark reports as it does any task's failure. And Hadoop's "Interrupted while
    joining on" with its trace (50 lines), when the stop interrupts the write of a checkpoint file on a local file
    system, whose rename runs ``readlink`` in a child process.
    A batch that has not ended `STOP_TIMEOUT` after its interruption is left running, with a warning."""
    was: dict[str, str | None] = {}  # the loggers quieted while the queries stop: their own levels before, if any
    patience = "?"
    try:
        patience = str(session.conf.get(STOP_TIMEOUT))
        set_log_level(session, SCHEDULER_LOGGER, "ERROR")
        set_log_level(session, TASK_LOGGER, "OFF")  # for good: its error comes after the stop
        for logger, quiet in ((QUERIES_LOGGER, "OFF"), (SHELL_LOGGER, "ERROR")):
            was[logger] = _own_level(session, logger)
            set_log_level(session, logger, quiet)
    except Exception as error:  # a JVM gone already: the queries are stopped all the same
        log.debug("could not quiet the DAG scheduler and the queries: %s", error)
    try:
        _stop_each(queries, between_batches_s, patience)
    finally:
        for logger, own in was.items():  # for the queries a session started later has (a test's)
            try:
                _put_back(session, logger, own)
            except Exception as error:  # the JVM gone meanwhile
                log.debug("could not put the level of %s back: %s", logger, error)


def stop_job(session: SparkSession, queries: Iterable[Any]) -> None:
    """Stop a job's queries (`stop_queries`) and close the Kafka clients of its batches, made again on first use: a
    job started again after, from its checkpoints, is as a new process's (after a failed query, say)."""
    stop_queries(session, queries)
    close_publishers()
    lookups.close_all()


def _own_level(session: SparkSession, logger: str) -> str | None:
    """The level set for ``logger`` itself, None when it takes its parents' (log4j's configuration has no entry of
    its name)."""
    own = _log4j(session).LogManager.getContext(False).getConfiguration().getLoggers().get(logger)
    return None if own is None else str(own.getLevel().name())


def _put_back(session: SparkSession, logger: str, level: str | None) -> None:
    """Put back ``logger``'s own level: ``level``, or none when it had none (None: the entry made for it is removed;
    set to the level it took from its parents, it would keep that one when theirs changes)."""
    if level is not None:
        set_log_level(session, logger, level)
        return
    context = _log4j(session).LogManager.getContext(False)
    context.getConfiguration().removeLogger(logger)
    context.updateLoggers()


def _log_level(session: SparkSession, logger: str) -> str:
    """The level ``logger`` logs at now (its own, or the one it takes from its parents)."""
    return str(_log4j(session).LogManager.getLogger(logger).getLevel().name())


def _stop_each(queries: Iterable[Any], between_batches_s: float, patience: str) -> None:
    """Stop the queries all at once, each in a thread: one after another, the waits of the queries whose batches do
    not end (``between_batches_s``, then `STOP_TIMEOUT`) added up."""
    queries = list(queries)
    with stopping(interrupts=False), ThreadPoolExecutor(max(1, len(queries)), thread_name_prefix="stop-query") as pool:
        for stopped in [pool.submit(_stop_one, query, between_batches_s, patience) for query in queries]:
            stopped.result()


def _stop_one(query: Any, between_batches_s: float, patience: str) -> None:
    deadline = time.monotonic() + between_batches_s
    try:
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.02)
    except Exception as error:  # a JVM gone already
        log.debug("could not wait for the end of a micro-batch: %s", error)
    try:
        with interrupting():  # not the wait above: a batch failing then has a cause of its own
            query.stop()
    except Exception as error:
        if java_class(error) == "java.util.concurrent.TimeoutException":  # `STOP_TIMEOUT` passed
            log.warning("a query's micro-batch did not end within %s of its stop (%s): left running, it runs again "
                        "when the job starts again", patience, STOP_TIMEOUT)  # fmt: skip
        else:  # the JVM got the signal too (a whole process group stopped, as systemd does)
            log.info("a query could not be stopped: Spark's JVM has gone already (%s)", type(error).__name__)


def stop(session: SparkSession | None) -> None:
    """Stop ``session`` (if one was made) and the jobs' Kafka clients, and make sure no Spark JVM started by this
    process outlives it.

    pyspark's JVM exits when this process's end of its stdin closes, but one still starting up (an interrupt during
    ``getOrCreate``) may not get there: it is terminated here, found among this process's children.
    """
    # From here on the JVM is stopping, then gone: a call to it from another thread (a callback, a query's) a moment
    # after the session stopped logged its failure with a traceback, after a failed start's one line. Kept until
    # another session starts (`spark_session`): a command ends with its session.
    logging.getLogger().addFilter(GATEWAY_GONE)
    if session is not None:
        # A task killed by a query's stop (its batch interrupted) may report its end after the context has stopped
        # its result getter: Spark logged that RejectedExecutionException as an ERROR with a 15-line trace (seen in
        # CI), its own race. Once the context stops, nothing it schedules matters any more.
        try:
            set_log_level(session, TASK_SCHEDULER_LOGGER, "OFF")
        except Exception as error:  # a JVM gone already: stopped below all the same
            log.debug("could not quiet the task scheduler: %s", error)
        try:
            with stopping():
                session.stop()
        except Exception as error:  # its JVM has gone already: what is left below is to close this process's clients
            log.info("Spark's JVM has gone already (%s)", type(error).__name__)
    # Then the jobs' own Kafka clients: left open, they would log connection errors once the cluster goes (a demo's).
    close_publishers()
    lookups.close_all()
    jvms = _children_running(b"org.apache.spark.deploy.SparkSubmit")
    for pid in jvms:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while jvms and time.monotonic() < deadline:
        jvms = [pid for pid in jvms if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        time.sleep(0.1)
    for pid in jvms:
        os.kill(pid, signal.SIGKILL)


def _children_running(marker: bytes) -> list[int]:
    """This process's children whose command line contains ``marker`` (Linux; none elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == os.getpid() and marker in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
