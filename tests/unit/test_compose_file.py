"""compose.yaml renders with the compose CLI the setup script installs (Debian's docker-compose
1.29; the compose plugin where there is one), every variable resolved."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from tests.support.compose import COMPOSE_FILE, clean_env, compose_command

pytestmark = pytest.mark.unit
SERVICES = {"postgres", "redis", "coordinator", "coordinator-b", "proxy", "worker", "flower"}
HAPROXY_CFG = COMPOSE_FILE.parent / "deploy" / "haproxy.cfg"


def _config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*compose_command(), "--file", str(COMPOSE_FILE), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _rendered(**variables: str) -> dict[str, Any]:
    done = _config(clean_env(RAAS_API_TOKEN="t0ken", FLOWER_PASSWORD="fl0wer", **variables))
    assert done.returncode == 0, done.stderr
    rendered: dict[str, Any] = yaml.safe_load(done.stdout)
    return rendered


def test_compose_file_renders_with_every_variable_resolved() -> None:
    services = _rendered()["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        environment = service.get("environment") or {}
        for key, value in environment.items():
            # An unexpanded ${...} would reach the process as text (compose 1.29 does not
            # expand nested defaults).
            assert value is None or "$" not in str(value), f"{name}: {key}={value}"
    app = services["coordinator"]["environment"]
    assert app["RAAS_DATABASE_URL"] == "postgresql+psycopg://raas@postgres:5432/raas"
    assert app["PGPASSWORD"] == services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "raas"
    assert app["RAAS_API_TOKEN"] == "t0ken"
    assert services["worker"]["environment"]["RAAS_DATA_DIR"] == "/var/lib/raas-worker"


def test_the_postgres_password_reaches_the_database_and_its_clients() -> None:
    services = _rendered(POSTGRES_PASSWORD="s3cret")["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    for app in ("coordinator", "worker"):
        assert services[app]["environment"]["PGPASSWORD"] == "s3cret"


def test_compose_refuses_to_run_without_a_cluster_token() -> None:
    done = _config(clean_env(FLOWER_PASSWORD="fl0wer"))
    assert done.returncode != 0
    assert "set RAAS_API_TOKEN" in done.stderr


def test_two_coordinator_replicas_run_behind_the_proxy_that_checks_their_readiness() -> None:
    services = _rendered()["services"]
    replicas = {name for name, service in services.items() if "coordinator" in service.get("command", [])}
    assert replicas == {"coordinator", "coordinator-b"}
    # Only the proxy is published; everything that reaches a coordinator goes through it.
    assert {name for name, service in services.items() if service.get("ports")} == {"proxy", "flower"}
    for name in ("coordinator", "coordinator-b", "worker"):
        assert services[name]["environment"]["RAAS_COORDINATOR_URL"] == "http://proxy:8700"
    for name in replicas:
        assert float(services[name]["environment"]["RAAS_DRAIN_S"]) > 0
        assert "RAAS_SECRET_KEY" in services[name]["environment"]  # the same for all, from the shell
    config = HAPROXY_CFG.read_text()
    assert "option httpchk GET /readyz" in config
    assert "option redispatch" in config
    served = {
        line.split()[2].split(":")[0] for line in config.splitlines() if line.strip().startswith("server ")
    }
    assert served == replicas
