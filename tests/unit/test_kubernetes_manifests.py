"""deploy/kubernetes/ holds valid Kubernetes objects that agree with the code they deploy.

The built-in kinds are validated offline against the Kubernetes JSON schemas that the PyPI
package kubernetes-validate bundles, strictly (an unknown field fails), at the oldest version the
manifests need (1.29) and the newest the package knows. KEDA's ScaledObject and
TriggerAuthentication are custom resources that no bundled schema covers: they are checked
against a JSON schema of the fields used here, taken from KEDA's documentation (2.12+), where
every trigger's metadata value must be a string.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from shared.celery_app import ITERATION_TIME_LIMIT_S, ITERATIONS_QUEUE, worker_queue
from tests.support.manifests import K8S_DIR, documents, keda_triggers, kustomization, objects, one

pytestmark = pytest.mark.unit

# Not applied by the kustomization: it shows the keys of the Secret the operator creates.
SECRET_EXAMPLE = "secret.example.yaml"
# Native sidecars and the other fields used here are all in 1.29.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}

_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_NAME_REF = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "kind": {"enum": ["TriggerAuthentication"]}},
}
_INT = {"type": "integer", "minimum": 0}


def _closed(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}


_TRIGGER_AUTHENTICATION_SPEC = _closed(
    ["secretTargetRef"],
    secretTargetRef={
        "type": "array",
        "minItems": 1,
        "items": _closed(
            ["parameter", "name", "key"],
            parameter={"type": "string"},
            name={"type": "string"},
            key={"type": "string"},
        ),
    },
)
_SCALED_OBJECT_SPEC = _closed(
    ["scaleTargetRef", "triggers"],
    scaleTargetRef=_NAME_REF,
    pollingInterval=_INT,
    cooldownPeriod=_INT,
    minReplicaCount=_INT,
    maxReplicaCount=_INT,
    fallback=_closed(["failureThreshold", "replicas"], failureThreshold=_INT, replicas=_INT),
    advanced=_closed([], horizontalPodAutoscalerConfig=_closed([], behavior={"type": "object"})),
    triggers={
        "type": "array",
        "minItems": 1,
        "items": _closed(
            ["type", "metadata"],
            type={"enum": ["redis", "prometheus"]},
            name={"type": "string"},
            metadata=_STRINGS,
            authenticationRef=_NAME_REF,
        ),
    },
)
KEDA_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"enum": sorted(KEDA_KINDS)},
        "metadata": {"type": "object", "required": ["name"]},
    },
    "allOf": [
        {
            "if": {"properties": {"kind": {"const": kind}}},
            "then": {"properties": {"spec": spec}},
        }
        for kind, spec in (
            ("TriggerAuthentication", _TRIGGER_AUTHENTICATION_SPEC),
            ("ScaledObject", _SCALED_OBJECT_SPEC),
        )
    ],
}
# The metadata each trigger type needs (KEDA's "required" parameters) and the ones it knows.
TRIGGER_FIELDS = {
    "redis": (
        {"listName", "listLength"},
        {"listName", "listLength", "activationListLength", "databaseIndex", "enableTLS", "address"},
    ),
    "prometheus": (
        {"serverAddress", "query", "threshold"},
        {"serverAddress", "query", "threshold", "activationThreshold", "ignoreNullValues", "namespace"},
    ),
}


def _worker_container() -> dict[str, Any]:
    containers = one("Deployment", "raas-worker")["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "worker")


def test_the_kustomization_applies_every_manifest_in_the_directory() -> None:
    listed = set(kustomization()["resources"])
    present = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml", SECRET_EXAMPLE}
    assert listed == present


@pytest.mark.parametrize("version", VERSIONS)
def test_built_in_objects_are_valid_against_the_kubernetes_schemas(version: str) -> None:
    built_in = [o for o in objects() if o["kind"] not in KEDA_KINDS] + documents(SECRET_EXAMPLE)
    assert {o["kind"] for o in built_in} >= {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap"}
    for obj in built_in:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): {exc.message}")


def test_keda_objects_match_the_fields_keda_knows() -> None:
    keda = [o for o in objects() if o["kind"] in KEDA_KINDS]
    assert {o["kind"] for o in keda} == KEDA_KINDS
    for obj in keda:
        jsonschema.validate(obj, KEDA_SCHEMA)
    for kind, trigger in keda_triggers().items():
        required, known = TRIGGER_FIELDS[kind]
        assert required <= set(trigger["metadata"]) <= known, kind


def test_the_redis_trigger_counts_the_queue_iterations_are_sent_to() -> None:
    redis = keda_triggers()["redis"]
    assert redis["metadata"]["listName"] == ITERATIONS_QUEUE
    # The broker's database: the one in the workers' RAAS_BROKER_URL.
    broker_url = documents(SECRET_EXAMPLE)[0]["stringData"]["RAAS_BROKER_URL"]
    assert redis["metadata"]["databaseIndex"] == broker_url.rsplit("/", 1)[1]
    auth = one("TriggerAuthentication", redis["authenticationRef"]["name"])
    assert {ref["parameter"] for ref in auth["spec"]["secretTargetRef"]} == {"address", "password"}


def test_the_prometheus_trigger_counts_queued_and_running_iterations() -> None:
    query = keda_triggers()["prometheus"]["metadata"]["query"]
    # tests/integration/test_keda_sources.py checks these series on a real coordinator's /metrics.
    assert re.search(r'raas_iterations\{status=~"queued\|running"\}', query), query


def test_both_triggers_aim_at_the_workers_concurrency() -> None:
    command = _worker_container()["command"]
    concurrency = command[command.index("--concurrency") + 1]
    triggers = keda_triggers()
    assert triggers["redis"]["metadata"]["listLength"] == concurrency
    assert triggers["prometheus"]["metadata"]["threshold"] == concurrency
    # Either trigger wakes the first worker as soon as one iteration waits.
    assert triggers["redis"]["metadata"]["activationListLength"] == "0"
    assert triggers["prometheus"]["metadata"]["activationThreshold"] == "0"


def test_the_scaled_object_scales_the_worker_deployment_which_leaves_the_count_to_it() -> None:
    target = one("ScaledObject")["spec"]["scaleTargetRef"]["name"]
    assert "replicas" not in one("Deployment", target)["spec"]
    assert _worker_container()["command"][:2] == ["raas", "worker"]


def test_a_stopping_worker_has_longer_than_an_iteration_can_run() -> None:
    pod = one("Deployment", "raas-worker")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > ITERATION_TIME_LIMIT_S


def test_the_worker_probes_and_stop_hook_name_the_pods_own_celery_node() -> None:
    # raas worker's node name is iterations@<hostname> (workers/main.py), the pod's name here.
    worker = _worker_container()
    for command in (
        worker["livenessProbe"]["exec"]["command"],
        worker["startupProbe"]["exec"]["command"],
        worker["lifecycle"]["preStop"]["exec"]["command"],
    ):
        assert command[:2] == ["sh", "-c"]
        argv = shlex.split(command[2])
        assert argv[:3] == ["celery", "--app", "shared.celery_app:app"]
        assert argv[argv.index("--destination") + 1] == f"{ITERATIONS_QUEUE}@$HOSTNAME"
    stop = shlex.split(worker["lifecycle"]["preStop"]["exec"]["command"][2])
    assert stop[3:6] == ["control", "cancel_consumer", ITERATIONS_QUEUE]
    # and its own queue (a task's next iteration routed to the worker holding its container)
    own = [stop[i + 1] for i, word in enumerate(stop) if word == "cancel_consumer"]
    assert own == [ITERATIONS_QUEUE, worker_queue(f"{ITERATIONS_QUEUE}@$HOSTNAME")]


def _refs(node: Any, field: str) -> list[dict[str, Any]]:
    """Every value under ``field`` (a reference, or a list of them) anywhere in ``node``."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == field:
                found.extend(value if isinstance(value, list) else [value])
            else:
                found.extend(_refs(value, field))
    elif isinstance(node, list):
        for item in node:
            found.extend(_refs(item, field))
    return found


def test_every_secret_and_config_key_the_manifests_read_exists() -> None:
    secret = documents(SECRET_EXAMPLE)[0]
    applied = objects()
    secret_refs = _refs(applied, "secretKeyRef") + _refs(applied, "secretTargetRef")
    assert {ref["name"] for ref in secret_refs} == {secret["metadata"]["name"]}
    assert {ref["key"] for ref in secret_refs} <= set(secret["stringData"])
    config_refs = _refs(applied, "configMapRef")
    assert {ref["name"] for ref in config_refs} == {one("ConfigMap")["metadata"]["name"]}


def _coordinator() -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = one("Deployment", "raas-coordinator")
    pod = deployment["spec"]["template"]["spec"]
    return deployment, next(c for c in pod["containers"] if c["name"] == "coordinator")


def test_two_coordinator_replicas_with_a_budget_that_keeps_one_serving() -> None:
    deployment, _ = _coordinator()
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    budget = one("PodDisruptionBudget", "raas-coordinator")
    assert budget["spec"]["minAvailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # Replicas cannot share a ReadWriteOnce volume: workspaces are in the object store.
    assert not [o for o in objects() if o["kind"] == "PersistentVolumeClaim"]
    assert one("ConfigMap")["data"]["RAAS_WORKSPACE_STORE"].startswith("s3://")


def test_a_draining_coordinator_fails_its_readiness_probe_before_it_stops() -> None:
    deployment, container = _coordinator()
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value") for e in container["env"]}
    drain_s = float(env["RAAS_DRAIN_S"])
    probe = container["readinessProbe"]
    # The endpoints drop the pod (one failed probe) well within its drain, and the drain ends
    # before the kubelet's SIGKILL.
    assert probe["periodSeconds"] * probe["failureThreshold"] < drain_s
    assert drain_s < deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
