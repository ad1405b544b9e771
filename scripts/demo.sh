#!/usr/bin/env bash
# The demo: sets everything up, then runs examples/hello end to end on this machine — a
# coordinator, a worker and (with no ANTHROPIC_API_KEY) the scripted model, each its own process.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
VENV="${RAAS_VENV:-$ROOT/.venv}"
RAAS="$VENV/bin/raas"
PROJECT="${1:-$ROOT/examples/hello}"
RUN_DIR="$ROOT/.data/demo"
mkdir -p "$RUN_DIR/logs"

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 60); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done; echo "$1 did not answer; see $RUN_DIR/logs" >&2; exit 1; }

psql "${RAAS_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}" -qtAc \
    "select 1 from pg_database where datname='raas_demo'" | grep -q 1 \
    || psql "${RAAS_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}" -qc "create database raas_demo"
export RAAS_DATABASE_URL="${RAAS_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/raas_demo}"
export RAAS_REDIS_URL="${RAAS_REDIS_URL:-redis://127.0.0.1:6379/14}"
export RAAS_BROKER_URL="${RAAS_BROKER_URL:-$RAAS_REDIS_URL}"
export RAAS_DATA_DIR="$RUN_DIR/data"
export RAAS_API_TOKEN="${RAAS_API_TOKEN:-demo-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
COORD_PORT="$(free_port)"
export RAAS_COORDINATOR_URL="http://127.0.0.1:$COORD_PORT"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

if [ -z "${ANTHROPIC_API_KEY:-}" ]; then
    MODEL_PORT="$(free_port)"
    echo "No ANTHROPIC_API_KEY: using the scripted model (examples/scripts/hello.json) on port $MODEL_PORT"
    "$RAAS" scripted-model --script "$ROOT/examples/scripts/hello.json" --port "$MODEL_PORT" \
        >"$RUN_DIR/logs/scripted-model.log" 2>&1 & pids+=($!)
    export ANTHROPIC_BASE_URL="http://127.0.0.1:$MODEL_PORT"
    wait_for "$ANTHROPIC_BASE_URL/_scripted/health"
fi
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
echo "Final hello.py in the project's workspace:"
git -C "$RAAS_DATA_DIR/workspaces/$PROJECT_ID.git" show main:hello.py 2>/dev/null || true
echo "Logs: $RUN_DIR/logs"
exit $code
