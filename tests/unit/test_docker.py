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
