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
# Three pytest-xdist workers, a test file each at a time: the tests mostly wait (Docker,
# subprocess stacks, timeouts), and each worker process has its own Postgres database, Redis
# server, data directory and labelled containers (tests/conftest.py). Files are handed out in
# collection order (not xdist's default, most tests first): the slow e2e and fault files start
# first, and each worker runs its files in the order a single process would.
# RAAS_TEST_WORKERS=0, or -n 0 / -p no:xdist among the arguments, runs them in one process.
PARALLEL=(-n "${RAAS_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder)
case " $* " in *" no:xdist "* | *" -pno:xdist "*) PARALLEL=() ;; esac
exec "$VENV/bin/pytest" "${PARALLEL[@]}" "$@"
