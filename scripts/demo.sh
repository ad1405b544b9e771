#!/usr/bin/env bash
# The demo: sets everything up, then runs examples/hello end to end.
#   bash scripts/demo.sh                 the embedded default: `raas run` (SQLite, in-process worker)
#   bash scripts/demo.sh --distributed   a coordinator, a worker and Postgres/Redis, each its own process
# With no ANTHROPIC_API_KEY, the bundled scripted model answers (examples/scripts/hello.json).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE="${1:-embedded}"
bash "$ROOT/scripts/setup.sh"
VENV="${RAAS_VENV:-$ROOT/.venv}"
RAAS="$VENV/bin/raas"
PROJECT="$ROOT/examples/hello"
RUN_DIR="$ROOT/.data/demo"
mkdir -p "$RUN_DIR/logs"

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 120); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done; echo "$1 did not answer; see $RUN_DIR/logs" >&2; exit 1; }

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

if [ -z "${ANTHROPIC_API_KEY:-}" ]; then
    MODEL_PORT="$(free_port)"
    echo "No ANTHROPIC_API_KEY: the scripted model answers (examples/scripts/hello.json), port $MODEL_PORT"
    "$RAAS" scripted-model --script "$ROOT/examples/scripts/hello.json" --port "$MODEL_PORT" \
        >"$RUN_DIR/logs/scripted-model.log" 2>&1 & pids+=($!)
    export ANTHROPIC_BASE_URL="http://127.0.0.1:$MODEL_PORT"
    wait_for "$ANTHROPIC_BASE_URL/_scripted/health"
fi

if [ "$MODE" != "--distributed" ]; then
    export RAAS_DATA_DIR="$RUN_DIR/embedded-$(date +%s)"
    unset RAAS_DATABASE_URL
    exec "$RAAS" run "$PROJECT"
fi

PG_ADMIN="${RAAS_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
psql "$PG_ADMIN" -qtAc "select 1 from pg_database where datname='raas_demo'" | grep -q 1 \
    || psql "$PG_ADMIN" -qc "create database raas_demo"
export RAAS_DATABASE_URL="${RAAS_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/raas_demo}"
export RAAS_REDIS_URL="${RAAS_REDIS_URL:-redis://127.0.0.1:6379/14}"
export RAAS_BROKER_URL="${RAAS_BROKER_URL:-$RAAS_REDIS_URL}"
export RAAS_DATA_DIR="$RUN_DIR/data"
export RAAS_API_TOKEN="${RAAS_API_TOKEN:-demo-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
COORD_PORT="$(free_port)"
export RAAS_COORDINATOR_URL="http://127.0.0.1:$COORD_PORT"
"$RAAS" coordinator --port "$COORD_PORT" >"$RUN_DIR/logs/coordinator.log" 2>&1 & pids+=($!)
wait_for "$RAAS_COORDINATOR_URL/healthz"
"$RAAS" worker --concurrency 1 >"$RUN_DIR/logs/worker.log" 2>&1 & pids+=($!)

PROJECT_ID="$("$RAAS" submit "$PROJECT")"
echo "Submitted $PROJECT as project $PROJECT_ID; following it:"
set +e
"$RAAS" follow "$PROJECT_ID"
code=$?
set -e
"$RAAS" status "$PROJECT_ID"
echo "hello.py in the project's workspace:"
git -C "$RAAS_DATA_DIR/workspaces/$PROJECT_ID.git" show main:hello.py 2>/dev/null || true
echo "Logs: $RUN_DIR/logs"
exit $code
