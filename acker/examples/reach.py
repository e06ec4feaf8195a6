"""Storm's ReachTopology as a coordinated chain: how many distinct people a URL was shown to.

    reach.step0  get tweeters   url → each user who tweeted it                       (shuffle)
    reach.step1  get followers  tweeter → each of their followers, keyed by follower  (fields grouping)
    reach.step2  partial unique follower → the distinct followers of the request this task saw;
                 ``finished``: their count                                            (to the joining step)
    reach.step3  count          the partial counts → their sum: the answer            (one task)

``finished`` is what makes the partial counts right: a task of step 2 can only count its distinct followers once
it has seen every follower of the request it will ever get, and the chain tells it when. A follower appears at one
task only (fields grouping), so the partial counts add up to the reach.

The data is generated from a seed (`Graph`), with skewed fan-out: a few URLs tweeted by many, a few users with
many followers, a URL nobody tweeted and one tweeted only by users nobody follows (their requests emit nothing at
steps 1 or 2 and still finish).

    acker reach run [--requests 20] [--tasks 3]        topics, the four steps as processes, the requests, a check
    acker reach step INDEX                               run one step (as many processes as you like)
    acker drpc call reach URL ...                        ask a running chain
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from acker.argtypes import at_least, non_negative, up_to
from acker.cli import TerminatedError, interrupted_status, run_until_signalled, sigterm_as_interrupt
from acker.config import ServiceConfig, add_arguments, load, to_argv
from acker.console import printable
from acker.coordinated import DEADLINE_MAX_S
from acker.drpc import DrpcClient, DrpcError
from acker.examples.stages import Stages, acker_command
from acker.help_text import prose
from acker.kafka.clients import answering, partition_count
from acker.kafka.coordinated_stage import Chain, CoordinatedStage, Emit, Request, Step, create_chain_topics
from acker.stage_metrics import add_port_argument, serve_stages

CHAIN = Chain("reach", 4)


@dataclass(frozen=True)
class Graph:
    """Who tweeted which URL and who follows whom, generated from ``seed`` with skewed degrees."""

    tweeted_by: dict[str, list[str]]
    followers: dict[str, list[str]]

    @classmethod
    def generate(cls, urls: int = 40, users: int = 400, seed: int = 7) -> Graph:
        rng = random.Random(seed)
        people = [f"u{i}" for i in range(users)]
        followers = {u: rng.sample(people, min(users - 1, int(rng.paretovariate(1.2) * 3))) for u in people}
        for lonely in people[-5:]:
            followers[lonely] = []
        tweeted_by = {f"url{i}": rng.sample(people, min(users, int(rng.paretovariate(1.1) * 2))) for i in range(urls)}
        tweeted_by["url-nobody"] = []  # nothing reaches steps 1, 2 and 3
        tweeted_by["url-lonely"] = people[-5:]  # tweeters without followers: nothing reaches steps 2 and 3
        return cls(tweeted_by, followers)

    def reach(self, url: str) -> int:
        return len({f for tweeter in self.tweeted_by.get(url, []) for f in self.followers.get(tweeter, [])})


class GetTweeters:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        for tweeter in self.graph.tweeted_by.get((value or b"").decode(), []):
            emit(tweeter.encode())

    def finished(self, request: Request, emit: Emit) -> None:
        pass


class GetFollowers:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        for follower in self.graph.followers.get((value or b"").decode(), []):
            emit(follower.encode(), key=follower.encode())

    def finished(self, request: Request, emit: Emit) -> None:
        pass


class PartialUniquer:
    """Keeps the request's distinct followers in the request's state (restored after a restart)."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        seen = request.state.setdefault("seen", [])
        follower = (value or b"").decode()
        if follower not in seen:
            seen.append(follower)

    def finished(self, request: Request, emit: Emit) -> None:
        emit(str(len(request.state.get("seen", []))).encode())


class CountAggregator:
    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        request.state["sum"] = request.state.get("sum", 0) + int(value or b"0")

    def finished(self, request: Request, emit: Emit) -> None:
        emit(str(request.state.get("sum", 0)).encode())


def steps(graph: Graph) -> list[Step]:
    return [GetTweeters(graph), GetFollowers(graph), PartialUniquer(), CountAggregator()]


# -- command line -------------------------------------------------------------------------------------------------


class Slowed:
    """A step whose every message takes ``delay_s`` longer (for demonstrations and tests of restarts)."""

    def __init__(self, inner: Step, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        time.sleep(self.delay_s)
        self.inner.execute(request, value, key, emit)

    def finished(self, request: Request, emit: Emit) -> None:
        self.inner.finished(request, emit)


def _cmd_step(args: argparse.Namespace) -> int:
    step = steps(Graph.generate())[args.index]
    if args.delay_ms:
        step = Slowed(step, args.delay_ms / 1000)
    config = load(args)
    metrics = serve_stages(args.stage_metrics_port)  # before the step joins its group: a port in use stops it first
    stage = CoordinatedStage(config, Chain(args.chain, CHAIN.steps), args.index, step)
    metrics.add(stage)
    return run_until_signalled(stage)


def _cmd_run(args: argparse.Namespace) -> int:
    config = load(args)
    chain = Chain(args.chain, CHAIN.steps)
    # Unanswered, each creation would fail after 30 s "waiting for controller".
    answering(config.client(), chain.topic(0))
    create_chain_topics(config, chain, args.tasks)
    if (tasks := partition_count(config.client(), chain.topic(0))) != args.tasks:
        print(f"chain {chain.name} exists with {tasks} tasks a step: it keeps them (--tasks is for a chain made now)",
              file=sys.stderr)  # fmt: skip
    steps_run = Stages()  # they die with this process (`spawn`)
    for i in range(chain.steps):
        for k in range(args.processes if i < chain.steps - 1 else 1):
            # An --instance-id names each process apart: it makes its transactional id, which two processes must not
            # share (the second would fence the first).
            own = f"{config.instance_id}-{i}.{k}" if config.instance_id else ""
            flags, env = to_argv(replace(config, metrics_port=0, instance_id=own))
            argv = acker_command("reach", "step", str(i), "--chain", chain.name, *flags, "--log-level", "WARNING")
            # Its own process group (`Stages`): a Ctrl-C in the terminal reaches this process alone, which stops each
            # step with one SIGTERM (a second signal ends a step at once, its consumer and transaction left to time
            # out, and the next run waited for them).
            steps_run.start(f"step {i}.{k}", (argv, env))
    restarting = Restarting(steps_run)
    graph = Graph.generate()
    urls = sorted(graph.tweeted_by)[: args.requests]
    wrong = 0
    try:
        with sigterm_as_interrupt():  # as Ctrl-C: every step stopped, and the exit status says so
            client = DrpcClient(config, chain)
            try:
                sent = {url: client.send(url.encode(), args.deadline_s) for url in urls}  # all at once: concurrent
                for url, request in sent.items():
                    try:
                        answer = int(client.wait(request, between=restarting) or b"-1")
                    except DrpcError as error:
                        print(f"{url:12} {error}")
                        wrong += 1
                        continue
                    expected = graph.reach(url)
                    wrong += answer != expected
                    print(f"{url:12} reach {answer:5}  {'ok' if answer == expected else f'WRONG, expected {expected}'}")
            finally:
                client.close()
    except (KeyboardInterrupt, TerminatedError) as stopped:
        print("interrupted: every step this run started is stopped", file=sys.stderr)
        return interrupted_status(stopped)
    finally:
        steps_run.stop(60)  # a step that does not stop is then killed, so that none outlives the run
    print(f"{len(urls) - wrong} of {len(urls)} answers exact")
    return 0 if wrong == 0 else 1


STEP_RESTARTS = 5  # how many times `reach run` starts again a step process that exited, each, in a run


class Restarting:
    """A supervisor's work for `reach run`: called while answers are waited for, starts again each step process that
    exited (a step stops, exit 2, when Kafka stays away longer than it waits: README, "Broker outages"), up to
    `STEP_RESTARTS` times each; one past that stays down, which is said once, and its requests run out of time."""

    def __init__(self, stages: Stages) -> None:
        self.stages = stages
        self.restarts: Counter[str] = Counter()
        self._down: set[str] = set()  # past its restarts, said

    def __call__(self) -> None:
        for name, code in self.stages.exited():
            if name in self._down:
                continue
            if self.restarts[name] == STEP_RESTARTS:
                self._down.add(name)
                print(f"{name} exited with status {code}, after {STEP_RESTARTS} restarts: it stays down",
                      file=sys.stderr)  # fmt: skip
                continue
            self.restarts[name] += 1
            print(f"{name} exited with status {code}: started again ({self.restarts[name]} of {STEP_RESTARTS})",
                  file=sys.stderr)  # fmt: skip
            self.stages.restart(name)


# What a coordinated chain reads of the settings: no acker is involved (`acker.kafka.coordinated_stage`).
CHAIN_SETTINGS = ("bootstrap_servers", "replication_factor", "instance_id", "open_transaction_warn_s")


def add_parser(sub: Any) -> None:
    reach = sub.add_parser(
        "reach",
        help="Storm's ReachTopology as a coordinated chain (Linear DRPC)",
        description=prose(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = reach.add_subparsers(dest="reach_command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="create the topics, start every step, send requests and check the answers")
    step = commands.add_parser("step", help="run one step of the chain until stopped")
    step.add_argument("index", type=int, choices=range(CHAIN.steps), help="0 tweeters, 1 followers, 2 unique, 3 count")
    step.add_argument(
        "--delay-ms", type=non_negative, default=0, help="slow every message down by this much [default: 0]"
    )
    # Its counts when it stops, and its late drops, are said at INFO (warnings only, it said nothing of them).
    step.add_argument("--log-level", default="INFO", help="logging level [default: INFO]")
    add_port_argument(step)
    for parser in (run, step):
        add_arguments(parser, CHAIN_SETTINGS)
        parser.add_argument("--chain", default=CHAIN.name, help=f"topic prefix of the chain [default: {CHAIN.name}]")
    run.add_argument("--requests", type=at_least(1), default=20, help="URLs asked, all at once [default: 20]")
    run.add_argument(
        "--tasks", type=at_least(1), default=3, help="tasks (partitions) of each step but the last, for a chain made "
        "now (one that exists keeps its own) [default: 3]"
    )  # fmt: skip
    run.add_argument("--processes", type=at_least(1), default=1, help="processes per step (but the last) [default: 1]")
    run.add_argument(
        "--deadline-s",
        type=up_to(DEADLINE_MAX_S),
        default=60.0,
        help=f"each request's deadline, from its sending ({DEADLINE_MAX_S} s at most) [default: 60]",
    )
    run.set_defaults(run=_cmd_run)
    step.set_defaults(run=_cmd_step)


def ask(
    config: ServiceConfig, chain: Chain, values: Sequence[str], timeout_s: float
) -> list[tuple[str, bytes | DrpcError]]:
    """`acker drpc call`: send every value at once, return each value with its answer (bytes, as the chain gave it)
    or its error, in the order given; a value given twice is two requests, and two answers."""
    client = DrpcClient(config, chain)
    try:
        sent = [(value, client.send(value.encode(), timeout_s)) for value in values]
        out: list[tuple[str, bytes | DrpcError]] = []
        for value, request in sent:
            try:
                out.append((value, client.wait(request) or b""))
            except DrpcError as error:
                out.append((value, error))
        return out
    finally:
        client.close()


def _cmd_drpc(args: argparse.Namespace) -> int:
    answers = ask(load(args), Chain(args.chain_name, args.steps), args.values, args.deadline_s)
    for value, answer in answers:
        # Any chain's answers: bytes, not always text, shown with what is not (and what a terminal would act on)
        # escaped.
        said = f"error: {answer}" if isinstance(answer, DrpcError) else answer.decode(errors="backslashreplace")
        print(f"{printable(value)}\t{printable(said)}")
    return 1 if any(isinstance(answer, DrpcError) for _value, answer in answers) else 0


def add_drpc_parser(sub: Any) -> None:
    drpc = sub.add_parser("drpc", help="send requests to a coordinated chain and wait for the answers")
    commands = drpc.add_subparsers(dest="drpc_command", required=True, metavar="COMMAND")
    call = commands.add_parser("call", help="send each VALUE as a request (all at once) and print the answers")
    add_arguments(call, ("bootstrap_servers",))
    call.add_argument("chain_name", metavar="CHAIN", help="the chain's name (its topics are CHAIN.step<i>)")
    call.add_argument("values", nargs="+", metavar="VALUE", help="a request's argument (a URL, for reach's chain)")
    call.add_argument(
        "--steps", type=at_least(1), default=CHAIN.steps, help=f"steps of the chain [default: {CHAIN.steps}]"
    )
    call.add_argument(
        "--deadline-s",
        type=up_to(DEADLINE_MAX_S),
        default=30.0,
        help=f"each request's deadline, from its sending ({DEADLINE_MAX_S} s at most) [default: 30]",
    )
    call.set_defaults(run=_cmd_drpc)
