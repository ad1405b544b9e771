#!/usr/bin/env bash
# The test command: sets up whatever is missing, then runs lint, types, the import rules, dead code and every test
# (unit, integration, docker, e2e) against real Postgres, Redis and Docker.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
VENV="${RAAS_VENV:-$ROOT/.venv}"
echo "== ruff"; "$VENV/bin/ruff" check . && "$VENV/bin/ruff" format --check .
echo "== mypy"; "$VENV/bin/mypy"
echo "== import rules"; "$VENV/bin/lint-imports" --no-cache
echo "== dead code"; "$VENV/bin/vulture"
echo "== pytest"
# Three pytest-xdist workers: the tests mostly wait (Docker, subprocess stacks, timeouts), and
# each worker process has its own Postgres database, Redis server, data directory and labelled
# containers (tests/conftest.py). --dist load --maxschedchunk 1 hands out tests one by one in
# collection order as workers free up (the default first hands each worker a quarter of its share
# at once, and one worker was left with a run of slow e2e tests while the others idled), so each
# worker runs its share in the order a single process would. Not loadfile/loadgroup: they key
# tests by node id, and schemathesis' operations in test_api_fuzz share one id, so all but one of
# them would silently not run.
# RAAS_TEST_WORKERS=0, or -n 0 / -p no:xdist among the arguments, runs them in one process.
PARALLEL=(-n "${RAAS_TEST_WORKERS:-3}" --dist load --maxschedchunk 1)
case " $* " in *" no:xdist "* | *" -pno:xdist "*) PARALLEL=() ;; esac
exec "$VENV/bin/pytest" "${PARALLEL[@]}" "$@"
