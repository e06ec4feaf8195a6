"""The child processes of a run (`wordcount run`, the demo, `reach run`): each started under a name with its command,
watched, started again, and stopped together. None outlives the runner: the kernel stops each when it dies (`spawn`).

Each runs in a process group of its own: a Ctrl-C in the terminal reaches the runner alone, which stops each child
with one SIGTERM (a second signal would end a stage at once, without its clean stop: its group membership and its
transaction left to time out, which the next run waits for)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import acker
from acker.config import STATIC_MEMBER_ID, child_environment, kafka_env_name, own_static_id
from acker.kafka.local_broker import spawn

# A static member's id, as the children's environment gives it (`to_argv`): one id names one process (two that share
# it fence each other out of their group, the one fenced stops), so a run's children, all started from one
# configuration, each get their own (`own_static_id`, in `Stages.start`); a child started again keeps its own, and
# takes its partitions back without a rebalance.
STATIC_ID = kafka_env_name(STATIC_MEMBER_ID)


def acker_command(*args: str) -> list[str]:
    """The argv of a child that runs ``acker *args`` with this process's acker package. ``python -m`` puts the
    working directory first on the child's path, and sources there (a clone whose package is installed, not
    editable; the image's copy) were imported in place of the package this process runs: their ``acker.schemas``
    exists only installed, and every stage failed at its start. ``-P`` leaves the directory out of the path, unless
    the package this process runs is the one in it."""
    from_here = Path(acker.__file__).resolve().parent.parent == Path.cwd().resolve()
    return [sys.executable, *(() if from_here else ("-P",)), "-m", "acker.cli", *args]


class Stages:
    """Child processes by name. Invariant: ``running`` holds the last process of each name started, with the argv it
    was started with; `restart` starts it again with that argv (`_argv_again` of it) and the environment its `start`
    was given."""

    def __init__(
        self,
        log: Callable[[str], None] | None = None,
        *,
        settings_given_only: bool = False,
        output_dir: Path | None = None,
    ) -> None:
        """``settings_given_only``: the stages take the settings of their commands alone, none of the ``ACKER_*``
        environment (`acker.config`) of this process: the demo's, which runs on its own broker whatever the
        environment says (a ``[kafka]`` table of ``ACKER_CONFIG`` would point them elsewhere, or add SASL).
        ``output_dir``: with a ``log`` of its own, each stage's output goes to ``<output_dir>/<name>.log`` (else
        nowhere), appended to by its restarts."""
        self.running: dict[str, tuple[list[str], subprocess.Popen[bytes]]] = {}
        self.environments: dict[str, dict[str, str]] = {}  # name → the environment of its processes
        self.since: dict[str, float] = {}  # name → when its process (the last one) started, time.monotonic()
        self.restarts = 0
        self._log = log or (lambda line: print(line, file=sys.stderr))
        self._quiet = log is not None  # with a log of its own: children are quiet, or write to files of their own
        self._output_dir = output_dir
        self._settings_given_only = settings_given_only

    def start(self, name: str, command: tuple[list[str], dict[str, str]]) -> None:
        """Start ``name``: ``command`` is its argv and the environment it adds to this process's
        (`child_environment`), a static member's id made its own (`STATIC_ID`)."""
        argv, env = command
        environment = child_environment(env, settings_given_only=self._settings_given_only)
        if environment.get(STATIC_ID):
            environment[STATIC_ID] = own_static_id(environment[STATIC_ID], name)
        self.environments[name] = environment
        self._spawn(name, argv)

    def _spawn(self, name: str, argv: list[str]) -> None:
        output: Any = None
        if self._quiet and self._output_dir is not None:
            self._output_dir.mkdir(parents=True, exist_ok=True)
            output = (self._output_dir / f"{name}.log").open("ab")  # the child holds it; closed here after the spawn
        elif self._quiet:
            output = subprocess.DEVNULL
        try:
            spawn(
                argv,
                env=self.environments[name],
                stdout=output,
                stderr=output,
                started=lambda process: self._started(name, argv, process),  # before a stop held is raised
                start_new_session=True,  # its own process group: see the module's docstring
            )
        finally:
            if hasattr(output, "close"):
                output.close()

    def _started(self, name: str, argv: list[str], process: subprocess.Popen[bytes]) -> None:
        self.running[name] = (argv, process)
        self.since[name] = time.monotonic()

    def up(self) -> list[str]:
        """The names of the stage processes running now, in order."""
        return sorted(name for name, (_, process) in self.running.items() if process.poll() is None)

    def kill(self, name: str) -> None:
        """SIGKILL: no clean shutdown, nothing flushed or committed."""
        _, process = self.running[name]
        process.kill()
        process.wait()

    def restart(self, name: str) -> None:
        """Start a stopped stage process again with its command."""
        argv, process = self.running[name]
        if process.poll() is None:
            raise RuntimeError(f"stage {name} is still running")
        self._spawn(name, self._argv_again(argv))
        self.restarts += 1

    def _argv_again(self, argv: list[str]) -> list[str]:
        """The argv of a process started again, given its last one's: the same here."""
        return argv

    def exited(self) -> list[tuple[str, int]]:
        """Each stage process (the last one of its name) that has exited, with its exit status, in name order."""
        return sorted(
            (name, code) for name, (_, process) in self.running.items() if (code := process.poll()) is not None
        )

    def stop(self, wait_s: float = 30) -> None:
        """SIGTERM to each stage process running, then SIGKILL to one not ended ``wait_s`` later (one deadline for
        all: each waited for its own ``wait_s`` in turn, and the k-th process stuck was killed after k times that)."""
        for _, process in self.running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        for _, process in self.running.values():
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
