"""docker/: the compose file is valid for a real compose tool and says only what the `acker` command accepts.

No Docker engine runs here, so nothing is started: `docker-compose config` (Debian's package, which
scripts/test.sh installs where it can) parses and validates the file, and every service's command and ACKER_*
setting is checked against the CLI and the typed configuration.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from acker.cli import build_parser
from acker.config import ENV_PREFIX, KAFKA_ENV_PREFIX, ServiceConfig, load
from acker.kafka import provision
from acker.kafka.local_broker import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
SETTINGS = {name.upper() for name in ServiceConfig.__dataclass_fields__ if name != "kafka"}


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _acker_commands(service: dict[str, Any]) -> list[list[str]]:
    """The `acker` invocations of a service (its entrypoint is `acker`, or a shell running `acker ...`)."""
    command = service.get("command", [])
    if service.get("entrypoint") == ["sh", "-c"]:
        return [shlex.split(part)[1:] for part in command[0].split("&&")]
    return [list(command)]


def test_the_compose_file_is_valid_for_docker_compose() -> None:
    if shutil.which("docker-compose") is None:
        if os.environ.get("CI") == "true":  # scripts/test.sh installs it there: its absence is a failure, not a skip
            pytest.fail("docker-compose (Debian's package) is not installed")
        pytest.skip("docker-compose (Debian's package) is not installed")
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_every_command_in_the_compose_file_is_one_acker_accepts() -> None:
    parser = build_parser()
    checked = 0
    for name, service in _services().items():
        if service.get("image", "").startswith("apache/kafka"):
            continue
        for argv in _acker_commands(service):
            args = parser.parse_args(argv)  # exits (fails the test) on an unknown command or flag
            assert args.run, name
            checked += 1
    assert checked >= 9


def test_every_acker_setting_in_the_compose_file_exists() -> None:
    for name, service in _services().items():
        environment = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        for key in environment:
            if key.startswith(ENV_PREFIX):
                assert key.startswith(KAFKA_ENV_PREFIX) or key[len(ENV_PREFIX) :] in SETTINGS, (name, key)
        if any(key.startswith(ENV_PREFIX) for key in environment):
            config = load(environ=environment)  # typed: a value that cannot be read raises
            assert config.bootstrap_servers == "kafka:9092"


def test_the_image_copies_what_exists() -> None:
    lines = (ROOT / "docker" / "Dockerfile").read_text().splitlines()
    copied = [source for line in lines if line.startswith("COPY ") for source in line.split()[1:-1]]
    assert copied and all((ROOT / path).exists() for path in copied)


def test_the_kafka_of_the_tests_container_is_the_local_brokers_and_the_compose_files() -> None:
    """The container was Confluent's 7.6 (Kafka 3.6): the new group protocol's tests could not pass on it."""
    assert provision.KAFKA_IMAGE == f"apache/kafka:{KAFKA_VERSION}" == _services()["kafka"]["image"]


def test_the_tests_container_can_run_transactions_on_its_one_node() -> None:
    """With Kafka's defaults (3 replicas, 2 in sync) the transaction log cannot be made on one broker: every
    init_transactions timed out (the replay job, the coordinated steps, their tests, the demo on Docker)."""
    settings = provision.container_settings(auto_create_topics=False, partitions=3)
    one_node = {"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "KAFKA_DEFAULT_REPLICATION_FACTOR"}  # fmt: skip
    assert {key: settings[key] for key in one_node} == dict.fromkeys(one_node, "1")
    compose = _services()["kafka"]["environment"]
    assert one_node - {"KAFKA_DEFAULT_REPLICATION_FACTOR"} <= set(compose)  # the transaction log's too
    assert {key: compose[key] for key in one_node & set(compose)} == dict.fromkeys(one_node & set(compose), "1")
    assert settings["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false" and settings["KAFKA_NUM_PARTITIONS"] == "3"
    inter_broker = settings["KAFKA_INTER_BROKER_LISTENER_NAME"]
    advertised = provision.starter_script("localhost", 32768).decode()
    assert advertised.startswith("export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://localhost:32768,")
    assert f"{inter_broker}://" in advertised and f"{inter_broker}://" in settings["KAFKA_LISTENERS"]
    assert "/etc/kafka/docker/run" in provision.CONTAINER_COMMAND


def test_the_images_build_steps_import_the_installed_package() -> None:
    """The image's working directory holds a copy of the sources, and ``python -c`` puts it first on the path:
    imported from there, `acker.schemas` (mapped from schemas/ only when installed) is missing and the build failed,
    and numba's cache went beside the copy. Every Python step of the build runs with ``-P``."""
    steps = [
        line for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines() if line.startswith("RUN python")
    ]
    assert steps and all(shlex.split(line)[1:3] == ["python", "-P"] for line in steps)


def test_the_images_compiled_loops_are_in_a_cache_its_user_can_write_and_no_sources_are_left_beside_it() -> None:
    """Compiled as root beside the installed package, the cache was passed over by numba in a container (its user
    cannot write there): every new container compiled again. The sources copied in stayed in the working directory,
    first on the path of each stage a run starts (`python -m`), which imported them, without `acker.schemas`."""
    lines = (ROOT / "docker" / "Dockerfile").read_text().splitlines()
    compiled = next(i for i, line in enumerate(lines) if "compile_now()" in line)
    [cache] = [line.split("=", 1)[1] for line in lines[:compiled] if line.startswith("ENV NUMBA_CACHE_DIR=")]
    owned = next(line for line in lines if "chown -R acker" in line).split("chown -R acker", 1)[1].split()
    assert any(cache.startswith(directory + "/") for directory in owned)
    [installed] = [line for line in lines if "pip install" in line]
    copied_to = [line.split()[1] for line in lines[: lines.index(installed)] if line.startswith("WORKDIR ")][-1]
    assert f"rm -rf {copied_to}/*" in installed
    assert [line for line in lines if line.startswith("WORKDIR ")][-1] != f"WORKDIR {copied_to}"
