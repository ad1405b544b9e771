"""Ready time with an environment's snapshot against the same project with no environment at all:
the time from an iteration's claim to its first model call, both measured in this run.

The project with an environment has a real setup: pip and raas-demo-dep installed from a loopback
PEP 503 index through the ``registries`` egress proxy into ``.venv/``, then byte-compiled. Its
first iteration runs the setup and snapshots it (reported, not compared); every later one, on a
fresh checkout as each project is, starts from the snapshot. Each project makes one model call
(the scripted model answers "TASK COMPLETE" at once); the two kinds are interleaved so drift hits
both alike. Goal (issue #26): ratio <= 1.2x.

Run: ``.venv/bin/python -m tests.benchmarks.bench_environment [--iterations N]``.
Needs Postgres, Redis and Docker (the sandbox image).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

import docker
from pydantic import SecretStr

from shared.db import session_scope
from shared.models import Iteration, Message
from tests.benchmarks import rig
from tests.benchmarks.table import Check, Figure, Table
from tests.support.engine import Engine, engine
from tests.support.package_index import package_index

RUN = secrets.token_hex(4)
SCRIPT = {
    "responses": [{"content": [{"type": "text", "text": "Nothing to do. TASK COMPLETE"}]}],
    "when_exhausted": "repeat_last",
}
PLAIN = 'completion_marker = "TASK COMPLETE"\n'
SETUP = """set -e
python3 -c 'import os, re, urllib.request as u
i = os.environ["RAAS_INDEX"] + "/simple/pip/"
u.urlretrieve(i + re.search("href=.([^\\x22]+)", u.urlopen(i).read().decode()).group(1), "/tmp/pip.whl")'
python3 /tmp/pip.whl/pip install -q --no-cache-dir --disable-pip-version-check --target .venv/site \\
    --index-url "$RAAS_INDEX/simple/" -r requirements.txt
python3 -m compileall -q .venv/site
"""


def environment_toml(index: str) -> str:
    port = index.rsplit(":", 1)[1]
    return f"""{PLAIN}
[environment]
setup = '''{SETUP}'''
key_files = ["requirements.txt"]
env = {{ RAAS_INDEX = "{index}", PYTHONPATH = "/workspace/.venv/site", RAAS_BENCH_RUN = "{RUN}" }}
registries = ["127.0.0.1:{port}"]
"""


def ready_s(eng: Engine, raas_toml: str) -> float:
    """Claim to first model call of the project's one iteration."""
    project_id = eng.submit(raas_toml=raas_toml, files={"requirements.txt": "pip\nraas-demo-dep==1.0\n"})
    eng.run_next(project_id)
    with session_scope() as session:
        iteration = session.query(Iteration).filter_by(project_id=project_id).one()
        reply = session.query(Message).filter_by(project_id=project_id, role="assistant").one()
        assert iteration.completed_task, iteration.error
        assert iteration.started_at is not None
        return (
            reply.created_at.timestamp() - float(reply.duration_s or 0.0) - iteration.started_at.timestamp()
        )


def measure(iterations: int, tmp: Path) -> Table:
    samples: dict[str, list[float]] = {"snapshot": [], "plain": []}
    with (
        package_index(tmp / "index") as index,
        engine(SCRIPT, tmp, anthropic_api_key=SecretStr("sk-bench")) as eng,
    ):
        with_env = environment_toml(index)
        first = ready_s(eng, with_env)  # runs the setup and makes the snapshot
        ready_s(eng, PLAIN)  # a warm-up of the plain kind too
        for _ in range(iterations):
            samples["snapshot"].append(ready_s(eng, with_env))
            samples["plain"].append(ready_s(eng, PLAIN))
    ours, theirs = statistics.median(samples["snapshot"]), statistics.median(samples["plain"])
    table = Table()
    table.figures.append(
        Figure(
            "claim to first model call (p50)",
            ours * 1000,
            theirs * 1000,
            "ms",
            "no environment",
            goal_max=1.2,
        )
    )
    table.checks.append(
        Check("first iteration ran the setup", first > ours, f"{first:.1f} s (setup and snapshot)")
    )
    spread = f"snapshot {min(samples['snapshot']) * 1000:.0f}-{max(samples['snapshot']) * 1000:.0f} ms, "
    spread += f"plain {min(samples['plain']) * 1000:.0f}-{max(samples['plain']) * 1000:.0f} ms"
    table.checks.append(Check(f"range over {iterations} each", True, spread))
    return table


def remove_snapshots() -> None:
    client = docker.from_env()
    for image in client.images.list(filters={"label": "raas.environment.key"}):
        if f"RAAS_BENCH_RUN={RUN}" in (image.attrs.get("Config", {}).get("Env") or []):
            client.images.remove(image.id, force=True)
    client.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=5, help="projects of each kind")
    args = parser.parse_args()
    try:
        with rig.services(), tempfile.TemporaryDirectory(prefix="bench-environment-") as tmp:
            (Path(tmp) / "index").mkdir()
            table = measure(args.iterations, Path(tmp))
    finally:
        remove_snapshots()
    table.print()
    return 0 if table.ok else 1


if __name__ == "__main__":
    sys.exit(main())
