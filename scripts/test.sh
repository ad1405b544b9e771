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
exec "$VENV/bin/pytest" "$@"
