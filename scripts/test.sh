#!/usr/bin/env bash
# The test command: sets up whatever is missing, then runs lint, types, the import rules, dead code and every test
# (unit, integration, docker, e2e, and the short chaos soak) against real Postgres, Redis and Docker.
# With arguments, it runs pytest with them (and no chaos soak): `bash scripts/test.sh -m unit`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
VENV="${RAAS_VENV:-$ROOT/.venv}"
lint() {
    echo "== ruff"; "$VENV/bin/ruff" check .; "$VENV/bin/ruff" format --check .
    echo "== mypy"; "$VENV/bin/mypy"
    echo "== import rules"; "$VENV/bin/lint-imports" --no-cache
    echo "== dead code"; "$VENV/bin/vulture"
}
echo "== set-up done at ${SECONDS}s"
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
if [ $# -gt 0 ]; then lint; exec "$VENV/bin/pytest" "${PARALLEL[@]}" "$@"; fi
# The whole run checks lint, types, the import rules and dead code beside the tests (they take
# ~20 s of one core, which the tests, mostly waiting, leave free); their output comes at the end.
LINT_LOG="$(mktemp /tmp/raas-lint.XXXXXX.log)"
lint >"$LINT_LOG" 2>&1 &
LINT_PID=$!
# The whole run also runs the short chaos soak (tests/chaos, docs/faults.md): three minutes of
# faults on a cluster of its own — its own Postgres, Redis, object store and dockerd (in a network
# namespace of its own), so it touches nothing the other tests use and runs beside them instead
# of adding its minutes to theirs. Its output goes to a log, printed when it ends.
CHAOS_LOG="$(mktemp /tmp/raas-chaos-short.XXXXXX.log)"
"$VENV/bin/pytest" -p no:xdist -p no:cacheprovider -m chaos tests/chaos -s -q >"$CHAOS_LOG" 2>&1 &
CHAOS_PID=$!
status=0
# --durations: the slowest tests, so a run that creeps toward the 25-minute ceiling says where.
"$VENV/bin/pytest" "${PARALLEL[@]}" --durations=30 || status=$?
echo "== lint, types, import rules and dead code (they ran beside the tests above)"
linted=0
wait "$LINT_PID" || linted=$?
cat "$LINT_LOG"
[ "$linted" -eq 0 ] || { echo "lint, types, import rules or dead code failed (exit $linted)"; status=1; }
echo "== chaos soak (short; it ran beside the tests above; pytest ended at ${SECONDS}s)"
chaos=0
wait "$CHAOS_PID" || chaos=$?
cat "$CHAOS_LOG"
[ "$chaos" -eq 0 ] || { echo "the chaos soak failed (exit $chaos); its log: $CHAOS_LOG"; status=1; }
echo "== the test command took ${SECONDS}s"
exit "$status"
