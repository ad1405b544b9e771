#!/usr/bin/env bash
# The demo: sets everything up, then runs examples/hello end to end.
#   bash scripts/demo.sh                 the embedded default: `raas run` (SQLite, in-process worker)
#   bash scripts/demo.sh --distributed   a coordinator, a worker and Postgres/Redis, each its own process
#   bash scripts/demo.sh claude-code     examples/claude-code: Claude Code as the harness, in the
#                                        sandbox, behind the LLM gateway (either mode; needs Docker)
#   bash scripts/demo.sh python-repo     examples/python-repo: an [environment] whose setup installs a
#                                        dependency once from a loopback index (needs Docker)
#   bash scripts/demo.sh node-repo       examples/node-repo: the same for a Node project, npm ci from a
#                                        vendored tarball (needs Docker and node on the host)
# With no ANTHROPIC_API_KEY, the bundled scripted model answers (examples/scripts/EXAMPLE.json).
# Whatever it starts, it stops on the way out: when the run ends, fails, or on Ctrl-C or SIGTERM.
# RAAS_DEMO_DIR moves its logs and data (default .data/demo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=embedded
EXAMPLE=hello
for arg in "$@"; do
    case "$arg" in
        --distributed) MODE=--distributed ;;
        claude-code) EXAMPLE=claude-code ;;
        python-repo) EXAMPLE=python-repo ;;
        node-repo) EXAMPLE=node-repo ;;
        *) echo "demo.sh: unknown argument $arg; use [claude-code|python-repo|node-repo] [--distributed]" >&2; exit 2 ;;
    esac
done
bash "$ROOT/scripts/setup.sh"
VENV="${RAAS_VENV:-$ROOT/.venv}"
RAAS="$VENV/bin/raas"
PROJECT="$ROOT/examples/$EXAMPLE"
# RAAS_DEMO_SCRIPT: another script for the scripted model (the tests slow the demo down with one).
SCRIPT="${RAAS_DEMO_SCRIPT:-$ROOT/examples/scripts/$EXAMPLE.json}"
RUN_DIR="${RAAS_DEMO_DIR:-$ROOT/.data/demo}"
mkdir -p "$RUN_DIR/logs"

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 120); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done; echo "$1 did not answer; see $RUN_DIR/logs" >&2; exit 1; }

# Servers run in the background, each in its own process group (set -m) so that stopping the
# group also stops what it forked (a worker's pool) and a terminal's Ctrl-C does not reach them
# before the command in the foreground (raas run, raas follow) has handled it. The script never
# `exec`s: its EXIT trap must outlive that command to stop the servers.
pids=()
start() { set -m; "$@" & set +m; pids+=($!); }
stop_all() {
    trap - INT TERM HUP
    local pid alive
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for _ in $(seq 100); do  # 20 s to shut down cleanly, then killed
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.2
    done
    for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_all EXIT
# A trapped signal ends the script (once the foreground command has ended), so EXIT runs.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

if [ -z "${ANTHROPIC_API_KEY:-}" ]; then
    MODEL_PORT="$(free_port)"
    echo "No ANTHROPIC_API_KEY: the scripted model answers (examples/scripts/$EXAMPLE.json), port $MODEL_PORT"
    start "$RAAS" scripted-model --script "$SCRIPT" --port "$MODEL_PORT" \
        >"$RUN_DIR/logs/scripted-model.log" 2>&1
    export ANTHROPIC_BASE_URL="http://127.0.0.1:$MODEL_PORT"
    wait_for "$ANTHROPIC_BASE_URL/_scripted/health"
fi

if [ "$EXAMPLE" = python-repo ]; then  # the package index its setup installs from
    start "$VENV/bin/python" "$ROOT/examples/scripts/python_index.py" --port 38765 \
        >"$RUN_DIR/logs/python-index.log" 2>&1
    wait_for "http://127.0.0.1:38765/simple/tinyslug/"
fi

if [ "$EXAMPLE" = node-repo ]; then  # its base image: the sandbox image with node and npm
    bash "$ROOT/examples/scripts/node_image.sh"
fi

if [ "$MODE" != "--distributed" ]; then
    export RAAS_DATA_DIR="$RUN_DIR/embedded-$(date +%s)"
    unset RAAS_DATABASE_URL
    code=0
    "$RAAS" run "$PROJECT" || code=$?
    exit "$code"
fi

if [ -z "${RAAS_DATABASE_URL:-}" ]; then
    PG_ADMIN="${RAAS_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
    psql "$PG_ADMIN" -qtAc "select 1 from pg_database where datname='raas_demo'" | grep -q 1 \
        || psql "$PG_ADMIN" -qc "create database raas_demo"
    export RAAS_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/raas_demo"
fi
export RAAS_REDIS_URL="${RAAS_REDIS_URL:-redis://127.0.0.1:6379/14}"
export RAAS_BROKER_URL="${RAAS_BROKER_URL:-$RAAS_REDIS_URL}"
export RAAS_DATA_DIR="$RUN_DIR/data"
export RAAS_API_TOKEN="${RAAS_API_TOKEN:-demo-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
COORD_PORT="$(free_port)"
export RAAS_COORDINATOR_URL="http://127.0.0.1:$COORD_PORT"
start "$RAAS" coordinator --port "$COORD_PORT" >"$RUN_DIR/logs/coordinator.log" 2>&1
wait_for "$RAAS_COORDINATOR_URL/healthz"
start "$RAAS" worker --concurrency 1 >"$RUN_DIR/logs/worker.log" 2>&1

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
