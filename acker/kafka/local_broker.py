"""A real single-node Apache Kafka broker (KRaft, broker and controller in one JVM) for tests, benchmarks
and demos, started from Maven Central jars: no Docker, no Kafka tarball.

    with LocalKafkaBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

or from a shell (prints the bootstrap address, runs until Ctrl-C or SIGTERM):

    python -m acker.kafka.local_broker

What it guarantees:

* The classpath is resolved once by Maven (``fetch_jars``) into a cache directory (``$ACKER_CACHE_DIR`` or
  ``~/.cache/kafka-acker``, one subdirectory per Kafka version). The cache is marked complete only after a
  successful download, so an interrupted one is redone; concurrent fetches are serialised by a file lock.
  A missing ``mvn`` or ``java``, or a failing Maven, raises ``KafkaBrokerError`` with Maven's output tail.
* ``LocalKafkaBroker.start()`` returns only once the broker accepts connections on 127.0.0.1, answers a
  metadata request and its group coordinator is loaded (so a first consumer group joins at once); otherwise
  it raises ``KafkaBrokerError`` with the tail of the broker's logs and leaves nothing running. The broker
  listens on loopback only, on free ports picked at start.
* No process is left behind: the JVM runs in its own process group, which ``stop()`` ends (SIGTERM, then
  SIGKILL after a grace period). ``stop()`` is idempotent; brokers still running when the interpreter exits
  are stopped by an ``atexit`` hook; on Linux the JVM also gets SIGTERM if the Python process dies without
  running it (e.g. SIGKILL), via PR_SET_PDEATHSIG (whichever thread starts it: the JVM is forked by one that
  lives as long as the process).
* The data directory is a fresh temporary directory removed by ``stop()``, unless ``keep_data=True`` or the
  caller passed ``data_dir`` (a caller's directory is never removed; starting again on it reuses the data). One
  whose owner died without stopping it is removed by the next broker started on the host, once its JVM is gone
  too (`sweep_orphaned_data_dirs`).

Needs Java 17+ and Maven 3.6.3+ on PATH (``JAVA_HOME``/``MAVEN_HOME`` honoured); Python: confluent-kafka.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import concurrent.futures
import contextlib
import ctypes
import fcntl
import hashlib
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from acker.argtypes import at_least

_T = TypeVar("_T")

__all__ = [
    "DEFAULT_JVM_OPTIONS",
    "KAFKA_VERSION",
    "KafkaBrokerError",
    "LocalKafkaBroker",
    "default_cache_dir",
    "fetch_jars",
    "java_executable",
    "kafka_tool_command",
    "main",
]

KAFKA_VERSION = "4.3.1"
"""Kafka version of ``resources/pom.xml`` (keep the two in step)."""

RESOURCES_DIR = Path(__file__).resolve().parent / "resources"
POM_PATH = RESOURCES_DIR / "pom.xml"
LOG4J2_CONFIG_PATH = RESOURCES_DIR / "log4j2.properties"

DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    # Kafka's own start scripts' heap and GC settings (kafka-server-start.sh, kafka-run-class.sh). A serial
    # collector with a small heap started a little faster, but paused the broker for 10-25 ms every second or two
    # under load (young collections): those pauses were the acker's p99 complete latency.
    # (The big start-up win is the AppCDS archive, see ``class_data_sharing``. C1-only JIT,
    # -XX:TieredStopAtLevel=1, would save another ~0.25 s but slows a benchmarked broker: not used.)
    "-Xms1g",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
"""JVM options of the broker process; replace them with ``LocalKafkaBroker(jvm_options=...)``."""

# How long `LocalKafkaBroker.start` waits for the broker to be ready, by default. A fresh one takes ~5 s on two idle
# cores; one started again after a crash ~14 s, of which ~9 s go to the controller waiting for the broker's earlier
# registration to expire (`broker.session.timeout.ms`, 9 s); on a busy two-core machine (CI: several tests at once,
# each with brokers, Spark and stage processes) a restart took over a minute. Waiting longer costs nothing when it
# starts, and a broker that exits while starting is reported at once.
STARTUP_TIMEOUT_S = 180.0

# Full coordinates, not the "dependency:" prefix: prefix resolution needs repository metadata (fails offline)
# and would pick whatever plugin version is newest.
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_MAVEN_TIMEOUT_S = 1800.0
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LOG_TAIL_LINES = 40
_STOP_GRACE_S = 20.0
_SERVER_LOG = "server.log"
_STDOUT_LOG = "kafka.out"
_PROPERTIES_FILE = "server.properties"
_LOG_DIR_NAME = "kafka-logs"
_PORTS_FILE = "ports"
_WARMUP_GROUP = "__acker_local_broker_readiness"

_log = logging.getLogger(__name__)


class KafkaBrokerError(RuntimeError):
    """The broker's classpath could not be fetched, or the broker could not be started."""


# --------------------------------------------------------------------------------------------------------
# Classpath


def default_cache_dir() -> Path:
    """``$ACKER_CACHE_DIR`` if set, else ``~/.cache/kafka-acker``."""
    env = os.environ.get("ACKER_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kafka-acker"


def _executable(name: str, home_env: str) -> str | None:
    home = os.environ.get(home_env)
    if home:
        candidate = Path(home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def java_executable() -> str:
    """The ``java`` to run the broker with (``$JAVA_HOME/bin/java`` first, then PATH)."""
    java = _executable("java", "JAVA_HOME")
    if java is None:
        raise KafkaBrokerError(
            "java not found (neither $JAVA_HOME/bin/java nor on PATH): the local Kafka broker needs Java 17+"
            " (e.g. apt-get install openjdk-17-jre-headless)"
        )
    return java


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(_ANSI_ESCAPE.sub("", text).splitlines()[-lines:])


def fetch_jars(cache_dir: Path | None = None) -> Path:
    """Resolve the broker's classpath (``resources/pom.xml``) once; return the directory holding the jars.

    The jars land in ``<cache_dir>/kafka-<KAFKA_VERSION>/lib``; a marker written after a successful download
    (recording the pom's hash) makes later calls return at once. Raises ``KafkaBrokerError`` when ``java`` or
    ``mvn`` is missing or Maven fails (with the tail of Maven's output).
    """
    base = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser()
    version_dir = base / f"kafka-{KAFKA_VERSION}"
    lib_dir = version_dir / "lib"
    marker = version_dir / ".complete"
    pom_bytes = POM_PATH.read_bytes()
    expected = hashlib.sha256(pom_bytes).hexdigest()

    def done() -> bool:
        try:
            return marker.read_text().strip() == expected and lib_dir.is_dir()
        except OSError:
            return False

    java_executable()  # fail early and clearly: the jars are useless without Java
    if done():
        _sweep_stale_fetches(version_dir)
        return lib_dir
    mvn = _executable("mvn", "MAVEN_HOME")
    if mvn is None:
        raise KafkaBrokerError(
            "mvn not found (neither $MAVEN_HOME/bin/mvn nor on PATH): it is needed once to fetch the Kafka "
            f"broker's jars into {lib_dir} (e.g. apt-get install maven)"
        )
    version_dir.mkdir(parents=True, exist_ok=True)
    with open(version_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching the same version
        if done():
            return lib_dir
        marker.unlink(missing_ok=True)
        for stale_work in version_dir.glob("fetch-*"):  # left by a fetch that was killed
            shutil.rmtree(stale_work, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=version_dir))
        try:
            pom = work / "pom.xml"  # a private copy: Maven may write next to its pom
            pom.write_bytes(pom_bytes)
            out_dir = work / "lib"
            cmd = [
                # -C: a jar whose checksum does not match (a broken mirror or proxy) fails the fetch; by default
                # Maven only warns (hidden by -q), and the bad jar, marked complete, failed every broker start.
                mvn, "-q", "-B", "-C", "-Dstyle.color=never", "-f", str(pom),
                f"{_DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={out_dir}",
            ]  # fmt: skip
            _log.info("fetching Kafka %s jars into %s", KAFKA_VERSION, lib_dir)
            try:
                # Dies with this process (`spawn`): a fetch killed midway left Maven running.
                result = _forked_lastingly(lambda: _fetched(cmd, work))
            except subprocess.TimeoutExpired as exc:
                output = _tail(exc.output if isinstance(exc.output, str) else "")
                what = f"mvn timed out after {_MAVEN_TIMEOUT_S:.0f} s fetching the Kafka broker's jars"
                raise KafkaBrokerError(f"{what}:\n{output}") from exc
            jars = list(out_dir.glob("*.jar")) if out_dir.is_dir() else []
            if result.returncode != 0 or not jars:
                raise KafkaBrokerError(
                    f"mvn failed (exit {result.returncode}) fetching the Kafka broker's jars "
                    f"({' '.join(cmd)}):\n{_tail(result.stdout)}"
                )
            if lib_dir.exists():
                shutil.rmtree(lib_dir)
            for stale in version_dir.glob("*.jsa"):  # class-data archives of the previous jars
                stale.unlink(missing_ok=True)
            out_dir.rename(lib_dir)
            marker.write_text(expected + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return lib_dir


def _sweep_stale_fetches(version_dir: Path) -> None:
    """Remove the work dirs of fetches that were killed midway (tens of MB each), unless a fetch holds the lock
    now: once the jars are there no fetch runs again, and the sweep before each fetch would never come."""
    stale = list(version_dir.glob("fetch-*"))
    if not stale:
        return
    with open(version_dir / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a fetch is running: its own work dir is among them
            return
        for work in stale:
            shutil.rmtree(work, ignore_errors=True)


def kafka_tool_command(main_class: str, *args: str, cache_dir: Path | None = None) -> list[str]:
    """The command line that runs one of Kafka's own tools from the broker's jars, e.g.
    ``kafka_tool_command("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
    broker.bootstrap_servers, "--describe", "--group", "g")`` for what standard tooling shows.
    Tools log errors only, to stderr."""
    lib_dir = fetch_jars(cache_dir)
    java = java_executable()
    archive = _class_data_archive(lib_dir, java)
    cds = [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []
    return [java, "-XX:TieredStopAtLevel=1", *cds, "-cp", f"{lib_dir}{os.sep}*", main_class, *args]


# --------------------------------------------------------------------------------------------------------
# Broker


_DUMP_KEPT_S = 60.0  # a dump whose owner is gone may still be being written this long by its JVM, which outlives it


def _sweep_dead_dumps(archive: Path) -> list[Path]:
    """Remove (and return) the class-data dumps next to ``archive`` (``<archive>.<owner pid>-<id>.tmp``) whose owner
    is gone and that were last written more than `_DUMP_KEPT_S` ago: an owner killed (SIGKILL, a CI timeout) cannot
    rename or remove its JVM's dump, which the JVM still writes as it stops (its parent's death stops it), and each
    such dump (about 50 MB) stayed in the cache for good. An archive is only a faster start: one lost costs nothing."""
    removed = []
    for dump in archive.parent.glob(f"{archive.name}.*.tmp"):
        owner = dump.name.removeprefix(f"{archive.name}.").partition("-")[0]
        try:
            if owner.isdigit() and not _alive(int(owner)) and time.time() - dump.stat().st_mtime > _DUMP_KEPT_S:
                dump.unlink()
                removed.append(dump)
        except OSError:  # removed meanwhile, by another broker's sweep
            continue
    return removed


def _class_data_archive(lib_dir: Path, java: str) -> Path:
    """Where the broker's AppCDS archive for these jars and this JVM lives (it may not exist yet)."""
    real = os.path.realpath(java)
    st = os.stat(real)
    key = hashlib.sha256(f"{real}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return lib_dir.parent / f"broker-classes-{key}.jsa"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _random_cluster_id() -> str:
    """What ``kafka.tools.StorageTool random-uuid`` prints (Kafka's ``Uuid.randomUuid()``), without a JVM."""
    while True:
        raw = os.urandom(16)
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        # Kafka rejects the all-zero and the metadata topic's id, and avoids a leading '-' (CLI parsing).
        if raw not in (bytes(16), bytes(15) + b"\x01") and not text.startswith("-"):
            return text


def _absolute_log_dirs(props: dict[str, object]) -> dict[str, object]:
    """``props`` with each ``log.dirs`` entry made absolute against this process's directory: the JVM runs in the
    data dir, where a relative entry named another directory than the one looked in for the broker's formatted
    storage (`LocalKafkaBroker._first_log_dir`), and a restart formatted it again."""
    given = props.get("log.dirs")
    if given is not None:
        entries = (entry.strip() for entry in str(given).split(","))
        props["log.dirs"] = ",".join(str(Path(entry).absolute()) for entry in entries if entry)
    return props


def _fetched(cmd: list[str], work: Path) -> subprocess.CompletedProcess[str]:
    """Maven run as ``cmd`` in ``work`` and waited for, as `subprocess.run` waits, but spawned to die with this
    process (`spawn`): killed, and `subprocess.TimeoutExpired` with what it wrote, after `_MAVEN_TIMEOUT_S`; killed
    too when this process is stopped meanwhile, also by a Ctrl-C held while it was forked and raised then."""
    started: list[subprocess.Popen[str]] = []
    try:
        spawn(cmd, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
              started=started.append)  # fmt: skip
        stdout, _ = started[0].communicate(timeout=_MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        started[0].kill()
        expired.output, _ = started[0].communicate()
        raise
    except BaseException:
        for process in started:
            process.kill()
            process.wait()
        raise
    return subprocess.CompletedProcess(cmd, started[0].returncode, stdout)


def _property_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def pdeathsig_preexec() -> Callable[[], None] | None:
    """On Linux, a child-side hook asking the kernel to SIGTERM the child when its parent thread dies."""
    if not sys.platform.startswith("linux") or not _on_a_lasting_thread():
        return None  # PR_SET_PDEATHSIG fires when the *thread* that forked exits: one that lives as the process does
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


_HELD = (signal.SIGINT, signal.SIGTERM)  # held while `spawn` forks on the main thread


def spawn(
    args: Sequence[str], *, started: Callable[[subprocess.Popen[Any]], object] | None = None, **popen: Any
) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` of a child the kernel stops when this process dies (`pdeathsig_preexec`);
    ``started`` is given it before any signal held meanwhile is raised (the caller's record of what to stop).

    A child forked with a ``preexec_fn`` has Python run its at-fork hooks in this process, logging's among them (it
    holds logging's lock across the fork). A SIGINT or SIGTERM whose handler raises (KeyboardInterrupt, the CLI's
    `TerminatedError`) and that came then was handled inside a hook, where Python drops the exception: the stop was
    lost, logging's lock stayed held, and every other thread that logged hung (a demo's Spark batches, its Ctrl-C).
    On the main thread, where handlers run, the two signals are held until the child is forked, then raised."""
    preexec = pdeathsig_preexec()
    held: list[int] = []
    handlers: dict[int, Any] = {}  # those put in place of a signal's handler, as they were
    try:
        if preexec is not None and threading.current_thread() is threading.main_thread():
            for sig in _HELD:
                if signal.getsignal(sig) is not None:  # not one installed outside Python: it could not be put back
                    # One at a time, each recorded once swapped: a handler of a signal pending (which signal.signal
                    # runs first) may raise before the next is.
                    handlers[sig] = signal.signal(sig, lambda signum, _frame: held.append(signum))
        process = subprocess.Popen(args, preexec_fn=preexec, **popen)  # noqa: PLW1509 - prctl and getppid only
        if started is not None:
            started(process)
        return process
    finally:
        _put_back(handlers, held)


def _put_back(handlers: dict[int, Any], held: list[int]) -> None:
    """The ``handlers`` in place again, then the signals ``held`` meanwhile raised. A handler put back may run (and
    raise) for a signal pending as the next is put back: each is put back all the same, and the first error raised
    once all are."""
    raised: BaseException | None = None
    for sig, handler in handlers.items():
        while True:
            try:
                signal.signal(sig, handler)
                break
            except BaseException as error:  # a signal's handler: the stop it says is raised below
                raised = raised or error
    if raised is not None:
        raise raised
    for signum in dict.fromkeys(held):
        signal.raise_signal(signum)


_spawns: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
_spawner_thread: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _forked_lastingly(start: Callable[[], _T]) -> _T:
    """``start()``, which forks a child given `pdeathsig_preexec`, on a thread that lives as long as the process:
    this one if it is the main thread, else a daemon thread of this module's. Started from another thread, the
    broker got no PR_SET_PDEATHSIG (it would fire when that thread ended), and outlived an owner killed with
    SIGKILL, its heap and ports with it."""
    global _spawner_thread  # noqa: PLW0603
    if _on_a_lasting_thread():
        return start()
    with _spawner_lock:
        if _spawner_thread is None:
            _spawner_thread = threading.Thread(target=_spawn_forever, name="acker-broker-spawner", daemon=True)
            _spawner_thread.start()
    done: concurrent.futures.Future[_T] = concurrent.futures.Future()
    _spawns.put((start, done))
    return done.result()


def _on_a_lasting_thread() -> bool:
    """Whether this thread lives as long as the process: the main thread, or the spawner."""
    return threading.current_thread() in (threading.main_thread(), _spawner_thread)


def _forget_spawner() -> None:
    """In a child forked from a process whose spawner ran: that thread is not in it (a job put on the queue would wait
    for ever), and the lock may have been held at the fork."""
    global _spawns, _spawner_thread, _spawner_lock
    _spawns, _spawner_thread, _spawner_lock = queue.SimpleQueue(), None, threading.Lock()


os.register_at_fork(after_in_child=_forget_spawner)


def _spawn_forever() -> None:
    while True:
        start, done = _spawns.get()
        try:
            done.set_result(start())
        except BaseException as error:  # the caller's to raise
            done.set_exception(error)


_live_brokers: set[LocalKafkaBroker] = set()
_live_lock = threading.Lock()


def _stop_all_brokers() -> None:
    with _live_lock:
        brokers = list(_live_brokers)
    for broker in brokers:
        try:
            broker.stop()
        except Exception:  # pragma: no cover - best effort at exit
            _log.exception("stopping %r at exit failed", broker)


atexit.register(_stop_all_brokers)


NODE_ID = 1  # the one node's id, broker and controller: what Kafka's tools name as ``--broker-id``


class LocalKafkaBroker:
    """A single-node Kafka broker (KRaft combined mode) on 127.0.0.1, run as a child JVM.

    Use as a context manager, or call ``start()`` and ``stop()``. ``bootstrap_servers`` is valid while it
    runs. Options:

    * ``num_partitions``: default partition count of topics created without one (``num.partitions``).
    * ``server_properties``: extra ``server.properties`` entries; they override the launcher's.
    * ``data_dir``: where ``server.properties``, the logs and the log segments go. Default: a fresh temporary
      directory, removed by ``stop()`` unless ``keep_data``. A given directory is kept; if it holds a
      formatted broker already, that broker's data (and if still free, its ports) are reused.
    * ``port``: the client (PLAINTEXT) port; 0 picks a free one.
    * ``controller_port``: the KRaft controller's port; 0 picks a free one (on a formatted ``data_dir``, the one it
      had, if still free).
    * ``cache_dir``: where the jars are cached (see ``fetch_jars``).
    * ``jvm_options``: JVM options (heap, GC, ...), default ``DEFAULT_JVM_OPTIONS``.
    * ``class_data_sharing``: start faster from an AppCDS archive of the broker's classes, kept next to the
      jars. The first broker without one writes it when it stops (that stop takes a few seconds longer).
    * ``startup_timeout``: seconds ``start()`` waits for the broker to be ready.
    * ``client_properties``: librdkafka settings of the client that checks readiness, for a listener that
      ``server_properties`` make secure (``security.protocol``, ``sasl.*``).
    """

    def __init__(
        self,
        *,
        num_partitions: int = 1,
        server_properties: Mapping[str, object] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
        port: int = 0,
        controller_port: int = 0,
        cache_dir: Path | None = None,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        class_data_sharing: bool = True,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        client_properties: Mapping[str, object] | None = None,
    ) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, not {num_partitions}")
        self.num_partitions = num_partitions
        self.server_properties = _absolute_log_dirs(dict(server_properties or {}))
        self._given_data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self.keep_data = keep_data
        if port and port == controller_port:
            raise ValueError(f"port and controller_port are both {port}: the broker needs two")
        self._requested_port = port
        self._requested_controller_port = controller_port
        self._cache_dir = cache_dir
        self.jvm_options = tuple(jvm_options)
        own_cds = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")
        self.class_data_sharing = class_data_sharing and not any(o.startswith(own_cds) for o in jvm_options)
        self.startup_timeout = startup_timeout
        self.client_properties = dict(client_properties or {})
        self._cds_archive: Path | None = None  # the archive this broker runs from or writes at exit
        self._cds_dump: Path | None = None  # where the JVM writes the archive at exit, if it has none yet
        self._ready = False
        self._lock = threading.RLock()
        self._process: subprocess.Popen[bytes] | None = None
        self._data_dir: Path | None = None
        self._log_starts: dict[str, int] = {}  # the size of each log file when the broker last started
        self._dir_lock: IO[str] | None = None  # held while a broker of this object uses its data dir
        self._port: int | None = None
        self._controller_port: int | None = None
        # Set by `crash` until `stop`: the client port its next start takes again, on the data dir it keeps.
        self._crashed_port: int | None = None

    # -- public state --------------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:PORT"`` of the running broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        """The client (PLAINTEXT) port of the running broker."""
        if self._port is None or self._process is None:
            raise KafkaBrokerError("the broker is not running: call start() first")
        return self._port

    @property
    def controller_port(self) -> int:
        """The KRaft controller port of the running broker."""
        if self._controller_port is None or self._process is None:
            raise KafkaBrokerError("the broker is not running: call start() first")
        return self._controller_port

    @property
    def data_dir(self) -> Path:
        """The broker's directory: ``server.properties``, ``server.log``, ``kafka.out``, ``kafka-logs/``."""
        if self._data_dir is None:
            raise KafkaBrokerError("the broker has no data dir yet: call start() first")
        return self._data_dir

    @property
    def pid(self) -> int | None:
        """The JVM's process id (also its process group id) while running."""
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        """True while the broker's JVM is alive."""
        return self._process is not None and self._process.poll() is None

    def __repr__(self) -> str:
        state = f"running on {self.bootstrap_servers}" if self.is_running() else "stopped"
        return f"<LocalKafkaBroker {state}>"

    # -- lifecycle -----------------------------------------------------------------------------------------

    def __enter__(self) -> LocalKafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> LocalKafkaBroker:
        """Start the broker and wait until it is ready (port open, metadata served, group coordinator
        loaded); returns ``self``.

        Raises ``KafkaBrokerError`` (with the tail of the broker's logs) if it dies or does not become ready
        within ``startup_timeout``; nothing is left running then. Starting a running broker is an error.
        """
        with self._lock:
            if self._process is not None:
                raise KafkaBrokerError(f"{self!r} is already started")
            lib_dir = fetch_jars(self._cache_dir)
            java = java_executable()
            self._cds_archive = _class_data_archive(lib_dir, java) if self.class_data_sharing else None
            attempts = 3  # a picked port can be taken by someone else before the JVM binds it
            for attempt in range(1, attempts + 1):
                try:
                    self._start_once(java, lib_dir)
                    return self
                except _PortTakenError as exc:
                    self._cleanup()
                    if attempt == attempts:
                        raise KafkaBrokerError(str(exc)) from None
                    _log.info("port taken while starting the broker, retrying: %s", exc)
                except BaseException:
                    self._cleanup()
                    raise
            raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Stop the broker (SIGTERM to its process group, SIGKILL after a grace period) and remove its data
        dir unless it is kept. Idempotent; safe to call on a broker that never started."""
        with self._lock:
            self._crashed_port = None  # a crashed broker's data goes too, as any other's
            self._cleanup()

    def crash(self) -> None:
        """Kill the broker's JVM with SIGKILL, as a crash of its machine would (nothing flushed, no controlled
        shutdown), keeping its data: the next `start` brings it up again on that data and on the same client port
        (`KafkaBrokerError` there if the port was taken meanwhile), where its clients find it again. For failure
        tests and the demo's chaos. Until `stop`, a start that fails keeps the data for the next."""
        with self._lock:
            if self._process is None:
                raise KafkaBrokerError(f"{self!r} is not running")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)  # the JVM leads its own group
            self._crashed_port = self.port
            self._cleanup()  # its data dir kept, and named by `_data_dir` still, while `_crashed_port` is set

    # -- internals -----------------------------------------------------------------------------------------

    def _prepare_data_dir(self) -> tuple[Path, bool]:
        """The data dir and whether its storage is formatted already."""
        if self._crashed_port is not None and self._data_dir is not None:  # a crashed broker's, started again
            return self._data_dir, (self._first_log_dir(self._data_dir) / "meta.properties").is_file()
        if self._given_data_dir is None:
            sweep_orphaned_data_dirs()
            data_dir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
            if not self.keep_data:  # a directory kept on purpose is never swept
                _write_owners(data_dir, os.getpid())
            # Formatted only where the caller's log.dirs names a dir of its own, which is never removed.
            return data_dir, (self._first_log_dir(data_dir) / "meta.properties").is_file()
        data_dir = self._given_data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        return data_dir, (self._first_log_dir(data_dir) / "meta.properties").is_file()

    def _first_log_dir(self, data_dir: Path) -> Path:
        """Where the broker's storage is formatted: its first log dir, as the caller's ``log.dirs`` may name it (a
        restart took storage formatted there for none, formatted it again, and Kafka refused the new cluster id)."""
        given = self.server_properties.get("log.dirs")
        return Path(str(given).split(",")[0].strip()) if given is not None else data_dir / _LOG_DIR_NAME

    def _hold_data_dir(self, data_dir: Path) -> None:
        """Lock ``data_dir`` for this broker's life (`_DIR_LOCK_FILE`), or `KafkaBrokerError` when another broker
        holds it: a second start on a directory in use wrote its ports and properties before Kafka's own lock
        refused its JVM, and the running broker's restart then came up on other ports."""
        handle = open(data_dir / _DIR_LOCK_FILE, "a+")  # noqa: SIM115 - held open until `_cleanup`
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise KafkaBrokerError(f"data dir {data_dir} is in use by another broker (started by {holder})") from None
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._dir_lock = handle

    def _pick_ports(self, data_dir: Path, formatted: bool) -> tuple[int, int]:
        requested = self._crashed_port or self._requested_port  # a crashed broker's clients look for it there
        ports_file = data_dir / _PORTS_FILE
        if formatted and ports_file.is_file():
            # Reusing a formatted dir: keep its ports if possible, so clients and the stored quorum agree.
            try:
                old_port, old_cport = (int(word) for word in ports_file.read_text().split())
            except ValueError:
                pass
            else:
                port, cport = requested or old_port, self._requested_controller_port or old_cport
                if port != cport and _port_is_free(port) and _port_is_free(cport):
                    return port, cport
        picked = iter(free_ports(3))
        ports = []
        for asked, what in ((requested, "port"), (self._requested_controller_port, "controller port")):
            if asked and not _port_is_free(asked):
                raise KafkaBrokerError(f"{what} {asked} on 127.0.0.1 is in use")
            ports.append(asked or next(p for p in picked if p not in (requested, self._requested_controller_port)))
        return ports[0], ports[1]

    def _properties(self, data_dir: Path, port: int, cport: int) -> dict[str, str]:
        props: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": NODE_ID,
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data_dir / _LOG_DIR_NAME),
            "num.partitions": self.num_partitions,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "offsets.topic.replication.factor": 1,
            # One partition instead of 50: a fresh broker's first consumer group joins in ~0.2 s, not ~3 s.
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": True,
        }
        props.update(self.server_properties)
        return {key: _property_value(value) for key, value in props.items()}

    @staticmethod
    def _write_properties(path: Path, props: Mapping[str, str]) -> None:
        lines = ["# Written by acker.kafka.local_broker: a single-node KRaft broker+controller on loopback."]
        lines += [f"{key}={value}" for key, value in props.items()]
        path.write_text("\n".join(lines) + "\n")

    def _java_command(
        self, java: str, lib_dir: Path, main_class: str, *args: str, dump_classes: bool = False
    ) -> list[str]:
        data_dir = self.data_dir
        cds: list[str] = []
        archive = self._cds_archive
        if archive is not None:  # whether or not the archive exists: a sibling's may have been put in place since
            _sweep_dead_dumps(archive)
        if archive is not None and archive.is_file():
            cds = [f"-XX:SharedArchiveFile={archive}"]
        elif archive is not None and dump_classes:
            self._cds_dump = archive.with_name(f"{archive.name}.{os.getpid()}-{id(self):x}.tmp")
            cds = [f"-XX:ArchiveClassesAtExit={self._cds_dump}"]
        return [
            java,
            *self.jvm_options,
            *cds,
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG_PATH}",
            f"-Dkafka.logs.dir={data_dir}",
            "-cp",
            f"{lib_dir}{os.sep}*",
            main_class,
            *args,
        ]

    def _start_once(self, java: str, lib_dir: Path) -> None:
        data_dir, formatted = self._prepare_data_dir()
        self._data_dir = data_dir
        self._hold_data_dir(data_dir)
        port, cport = self._pick_ports(data_dir, formatted)
        props_path = data_dir / _PROPERTIES_FILE
        self._write_properties(props_path, self._properties(data_dir, port, cport))
        (data_dir / _PORTS_FILE).write_text(f"{port} {cport}\n")  # lets a restart on this dir keep them
        if not formatted:
            self._format_storage(java, lib_dir, props_path)
        stdout_path = data_dir / _STDOUT_LOG
        self._log_starts = {name: _size(data_dir / name) for name in (_STDOUT_LOG, _SERVER_LOG)}
        cmd = self._java_command(java, lib_dir, "kafka.Kafka", str(props_path), dump_classes=True)
        t0 = time.monotonic()
        with open(stdout_path, "ab") as out:
            self._process = _forked_lastingly(lambda: spawn(
                cmd, cwd=data_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, started=self._started,
            ))  # fmt: skip
        self._port, self._controller_port = port, cport
        if (data_dir / _OWNERS_FILE).is_file():  # a temporary dir, to be swept if its processes die
            _write_owners(data_dir, os.getpid(), self._process.pid)
        with _live_lock:
            _live_brokers.add(self)
        self._wait_ready(port, t0 + self.startup_timeout)
        self._ready = True
        self._forget_unusable_archive(stdout_path.read_text(errors="replace"))
        _log.info("Kafka broker ready on 127.0.0.1:%d in %.1f s (%s)", port, time.monotonic() - t0, data_dir)

    def _format_storage(self, java: str, lib_dir: Path, props_path: Path) -> None:
        cmd = self._java_command(
            java, lib_dir, "kafka.tools.StorageTool",
            "format", "-t", _random_cluster_id(), "-c", str(props_path), "--standalone",
        )  # fmt: skip
        # Format is light work: the short-lived JVM starts faster with only the C1 compiler.
        cmd.insert(1, "-XX:TieredStopAtLevel=1")
        result = subprocess.run(
            cmd, cwd=props_path.parent, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=120, check=False, start_new_session=True,
        )  # fmt: skip
        if result.returncode != 0:
            raise KafkaBrokerError(
                f"formatting the broker's storage failed (exit {result.returncode}):\n{_tail(result.stdout)}"
            )
        self._forget_unusable_archive(result.stdout)

    def _forget_unusable_archive(self, jvm_output: str) -> None:
        """The JVM ignores (with a warning) an archive it cannot use, e.g. from another JDK build: remove it,
        so that the next broker writes a fresh one."""
        archive = self._cds_archive
        if archive is not None and self._cds_dump is None and "Unable to use shared archive" in jvm_output:
            _log.info("the JVM could not use %s: removing it", archive)
            archive.unlink(missing_ok=True)

    def log_tail(self) -> str:
        """The last lines of the broker's console output and server.log (while its data dir exists) written since
        it was last started: on a kept data dir they follow earlier runs' (whose "Address already in use", say, was
        taken for this start's failure)."""
        parts = []
        for name in (_STDOUT_LOG, _SERVER_LOG):
            path = (self._data_dir or Path("/nonexistent")) / name
            try:
                with open(path, "rb") as log_file:
                    start = self._log_starts.get(name, 0)
                    log_file.seek(start if start <= os.fstat(log_file.fileno()).st_size else 0)  # rolled: all of it
                    text = log_file.read().decode(errors="replace")
            except OSError:
                continue
            if text.strip():
                parts.append(f"--- {path} (last lines) ---\n{_tail(text)}")
        return "\n".join(parts) or "(the broker wrote no log)"

    def _failure(self, what: str) -> KafkaBrokerError:
        tail = self.log_tail()
        if "Address already in use" in tail:
            return _PortTakenError(f"{what}; a port was taken:\n{tail}")
        hint = ""
        if "UnsupportedClassVersionError" in tail:
            hint = f" (Kafka {KAFKA_VERSION} needs Java 17+; java is {java_executable()})"
        return KafkaBrokerError(f"{what}{hint}:\n{tail}")

    def _wait_ready(self, port: int, deadline: float) -> None:
        """Wait until the port accepts connections, a metadata request lists the broker, and the group
        coordinator has loaded ``__consumer_offsets`` (else a fresh broker's first consumer group gets
        COORDINATOR_LOAD_IN_PROGRESS and librdkafka retries its JoinGroup only ~3 s later)."""
        proc = self._process
        assert proc is not None
        admin: AdminClient | None = None
        listed = False
        last_error = "the port never accepted a connection"
        while True:
            code = proc.poll()
            if code is not None:
                raise self._failure(f"the Kafka broker exited with code {code} while starting")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._failure(
                    f"the Kafka broker was not ready within {self.startup_timeout:.0f} s ({last_error})"
                )
            request_timeout = max(0.5, min(2.0, remaining))
            if admin is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        pass
                except OSError as exc:
                    last_error = f"connecting to 127.0.0.1:{port}: {exc}"
                    time.sleep(0.05)
                    continue
                config: dict[str, Any] = {
                    **self.client_properties,
                    "bootstrap.servers": f"127.0.0.1:{port}",
                    "logger": _log,  # not librdkafka's stderr
                    "socket.connection.setup.timeout.ms": 2000,
                }
                admin = AdminClient(config)
            try:
                if not listed:
                    metadata = admin.list_topics(timeout=request_timeout)
                    if not metadata.brokers:
                        last_error = "metadata listed no broker"
                        time.sleep(0.05)
                        continue
                    own = self._formatted_cluster_id()
                    if own is not None and metadata.cluster_id != own:
                        # Another process's broker took the port between its pick and this JVM's bind (which fails):
                        # taken for ours, its clients would have talked to a broker of other settings, or to none.
                        raise _PortTakenError(f"another Kafka cluster ({metadata.cluster_id}) answers on "
                                              f"127.0.0.1:{port}")  # fmt: skip
                    listed = True
                # Succeeds (group state DEAD) once the coordinator is loaded; creates __consumer_offsets.
                futures = admin.describe_consumer_groups([_WARMUP_GROUP], request_timeout=request_timeout)
                futures[_WARMUP_GROUP].result(timeout=request_timeout + 1)
                return
            except (KafkaException, TimeoutError) as exc:
                last_error = f"{'group coordinator' if listed else 'metadata request'}: {exc!r}"
                time.sleep(0.05)

    def _formatted_cluster_id(self) -> str | None:
        """The cluster id this broker's storage was formatted with, in its first log dir (`_first_log_dir`); None if
        it cannot be read."""
        data_dir = self._data_dir or Path("/nonexistent")
        try:
            return _read_properties(self._first_log_dir(data_dir) / "meta.properties").get("cluster.id")
        except OSError:
            return None

    def _started(self, process: subprocess.Popen[Any]) -> None:
        """The JVM is known as soon as it is forked: a stop raised just after (`spawn`) stops it too."""
        self._process = process

    def _cleanup(self) -> None:
        proc, self._process = self._process, None
        clean_exit = _terminate_group(proc) if proc is not None else False
        with _live_lock:
            _live_brokers.discard(self)
        dump, self._cds_dump = self._cds_dump, None
        if dump is not None and self._cds_archive is not None:
            # Keep the class-data archive only from a broker that started and stopped cleanly.
            if clean_exit and self._ready and dump.is_file() and dump.stat().st_size > 0:
                os.replace(dump, self._cds_archive)
            dump.unlink(missing_ok=True)
        self._ready = False
        if self._dir_lock is not None:
            self._dir_lock.close()  # the lock goes with it
            self._dir_lock = None
        data_dir = self._data_dir
        if data_dir is not None and self._given_data_dir is None and not self.keep_data and self._crashed_port is None:
            shutil.rmtree(data_dir, ignore_errors=True)
            self._data_dir = None
        self._port = self._controller_port = None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` lines (comments and blank lines left out; no escapes: the files read
    here are written by Kafka's tools or by this module)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[:1] not in "#!")
    return {key.strip(): value.strip() for key, value in pairs}


class _PortTakenError(KafkaBrokerError):
    """The broker could not bind a picked port (someone took it meanwhile)."""


_TEMP_PREFIX = "acker-kafka-"
_DIR_LOCK_FILE = ".launcher.lock"  # in a data dir: locked by the process whose broker uses it (`_hold_data_dir`)
# In a temporary data dir: the PID namespace, then the ids of the process that made it and of its JVM
# (`sweep_orphaned_data_dirs`).
_OWNERS_FILE = ".owners"


def _write_owners(data_dir: Path, *pids: int) -> None:
    (data_dir / _OWNERS_FILE).write_text(f"{_pid_namespace()}\n{' '.join(map(str, pids))}\n")


def sweep_orphaned_data_dirs(base: Path | None = None) -> list[Path]:
    """Remove (and return) the temporary data dirs under ``base`` (the system's temporary directory) whose owner
    and JVM are both gone: an owner killed before it could stop its broker (SIGKILL, a SIGTERM it did not handle)
    takes its JVM with it (PR_SET_PDEATHSIG), not the directory, and these piled up. Only directories that name
    their processes are looked at, in this process's PID namespace (a container sharing the temporary directory has
    its own process ids); a process id taken by another process since counts as alive (kept)."""
    removed = []
    for path in Path(base or tempfile.gettempdir()).glob(f"{_TEMP_PREFIX}*"):
        try:
            namespace, _, ids = (path / _OWNERS_FILE).read_text().partition("\n")
            pids = [int(pid) for pid in ids.split()]
            if int(namespace) != _pid_namespace():
                continue
        except (OSError, ValueError):
            continue
        if pids and not any(_alive(pid) for pid in pids):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _pid_namespace() -> int:
    """This process's PID namespace (its inode), 0 where there is none to tell."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        pass
    return True


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (a zombie leader keeps its group id taken)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:  # reaped already (e.g. by Popen.poll)
        return True


def _terminate_group(proc: subprocess.Popen[bytes], grace: float = _STOP_GRACE_S) -> bool:
    """SIGTERM the process group led by ``proc``, wait up to ``grace`` s, then SIGKILL what is left of the
    group and reap ``proc``. True if the leader exited on SIGTERM."""
    pgid = proc.pid  # start_new_session=True: the JVM leads its own group

    def signal_group(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)

    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        while not (clean := _exited(pgid)) and time.monotonic() < deadline:
            time.sleep(0.02)
    except BaseException:  # a second Ctrl-C in the wait: the group goes at once rather than living on unwatched
        signal_group(signal.SIGKILL)
        proc.wait()
        raise
    if not clean:
        _log.warning("Kafka broker (pid %d) ignored SIGTERM for %.0f s: killing it", pgid, grace)
    # Whatever is left of the group (the JVM if it hung; any stray child) goes now, before the leader is
    # reaped, so the group id cannot have been reused.
    signal_group(signal.SIGKILL)
    proc.wait()
    return clean


# --------------------------------------------------------------------------------------------------------
# Command line


class _StopRequestedError(BaseException):
    """SIGINT or SIGTERM while `main` starts the broker (not an `Exception`: nothing on the way may take it for an
    error of its own and go on)."""


def _pairs(parser: argparse.ArgumentParser, items: list[str], flag: str) -> dict[str, object]:
    """``KEY=VALUE`` items of a repeatable flag → a dict; a parser error for one that is not."""
    found: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"{flag} wants KEY=VALUE, not {item!r}")
        found[key.strip()] = value.strip()
    return found


def _login_hint(server: Mapping[str, object], client: Mapping[str, object]) -> str:
    """What to add to a broker's failed start whose listeners take logins that its readiness check was not given: it
    was refused, and said as a transport failure."""
    protocols = str(server.get("listener.security.protocol.map", "")).upper()
    if client or ("SASL" not in protocols and "SSL" not in protocols):
        return ""
    return (" (its listeners take logins: give the readiness check's with --client security.protocol=..., --client "
            "sasl.*/ssl.*)")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run a local broker until Ctrl-C or SIGTERM; print its bootstrap address on stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m acker.kafka.local_broker",
        description="Run a single-node Apache Kafka broker (KRaft) on 127.0.0.1 until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--port",
        type=at_least(0, 65536),
        default=0,
        help="client port (default: a free one)",
    )
    parser.add_argument(
        "--controller-port",
        type=at_least(0, 65536),
        default=0,
        help="the KRaft controller's port (default: a free one; on a kept --data-dir, the one it had if still free)",
    )
    parser.add_argument("--partitions", type=at_least(1), default=1, help="num.partitions (default: 1)")
    parser.add_argument("--data-dir", type=Path, help="data directory (kept; reused if formatted)")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data directory")
    parser.add_argument(
        "--property", "-p", action="append", default=[], metavar="KEY=VALUE",
        help="extra server.properties entry (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--client", action="append", default=[], metavar="KEY=VALUE",
        help="librdkafka setting of the client that checks the broker is ready, for a client listener that takes "
        "logins only (security.protocol, sasl.*, ssl.*; repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout",
        type=float,
        default=STARTUP_TIMEOUT_S,
        help=f"startup timeout in seconds [default: {STARTUP_TIMEOUT_S:g}]",
    )
    args = parser.parse_args(argv)
    extra, client = _pairs(parser, args.property, "--property"), _pairs(parser, args.client, "--client")
    if args.port and args.port == args.controller_port:
        parser.error(f"--port and --controller-port are both {args.port}: the broker needs two")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    stop_requested = threading.Event()
    starting = True

    def on_signal(signum: int, frame: FrameType | None) -> None:
        first = not stop_requested.is_set()
        stop_requested.set()
        # A first fetch of the jars can take minutes: stopped now, not once the broker is up. Once only: a second
        # signal raised in the middle of that stop (its wait for the JVM), which went no further.
        if starting and first:
            raise _StopRequestedError

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = LocalKafkaBroker(
        num_partitions=args.partitions, server_properties=extra, data_dir=args.data_dir,
        keep_data=args.keep_data, port=args.port, controller_port=args.controller_port, startup_timeout=args.timeout,
        client_properties=client,
    )  # fmt: skip
    try:
        t0 = time.monotonic()
        try:
            broker.start()  # cleans up after whatever it raises (Maven killed by subprocess.run, the JVM stopped)
        except KafkaBrokerError as exc:
            print(f"error: {exc}{_login_hint(extra, client)}", file=sys.stderr)
            return 1
        except _StopRequestedError:
            return 130
        finally:
            starting = False
        if stop_requested.is_set():
            return 130
        elapsed = time.monotonic() - t0
        print(
            f"Kafka {KAFKA_VERSION} broker ready in {elapsed:.1f} s (data dir {broker.data_dir});"
            " Ctrl-C stops it. Bootstrap servers:",
            file=sys.stderr,
        )
        print(broker.bootstrap_servers, flush=True)
        while not stop_requested.wait(0.5):
            if not broker.is_running():
                print(f"error: the broker died:\n{broker.log_tail()}", file=sys.stderr)
                return 1
        print("stopping the broker", file=sys.stderr)
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
