#!/usr/bin/env bash
# Everything Constellation needs on a Debian machine, as root: system packages, Postgres,
# Redis, a Docker engine, the Python environment, the offline sandbox image and the pinned
# agent CLIs (scripts/install-harnesses.sh).
# Idempotent: each step checks first and does only what is missing. Source it or run it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RAAS_VENV:-$ROOT/.venv}"
PG_URL="${RAAS_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}"
REDIS_HOST=127.0.0.1
REDIS_PORT=6379

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts services)"

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || say "apt-get update failed; trying with the cached package lists"
    apt-get install -y -qq "${missing[@]}" >/dev/null
}

start_postgres() {
    command -v pg_ctlcluster >/dev/null || apt_install postgresql
    if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
        say "starting PostgreSQL"
        for version in /etc/postgresql/*; do
            pg_ctlcluster --skip-systemctl-redirect "$(basename "$version")" main start || true
        done
        for _ in $(seq 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
    fi
    pg_isready -h 127.0.0.1 -p 5432 -q || die "PostgreSQL does not answer on 127.0.0.1:5432"
    psql "$PG_URL" -qtAc 'select 1' >/dev/null 2>&1 \
        || die "cannot log in to PostgreSQL as $PG_URL; allow trust auth for 127.0.0.1 or set RAAS_TEST_PG_URL"
}

start_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    if ! redis-cli -h $REDIS_HOST -p $REDIS_PORT ping >/dev/null 2>&1; then
        say "starting Redis"
        mkdir -p /var/lib/redis /var/log/redis
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port $REDIS_PORT --save "" \
            --appendonly no --dir /var/lib/redis --logfile /var/log/redis/raas.log
        for _ in $(seq 30); do redis-cli -p $REDIS_PORT ping >/dev/null 2>&1 && break; sleep 0.5; done
    fi
    redis-cli -h $REDIS_HOST -p $REDIS_PORT ping >/dev/null 2>&1 || die "Redis does not answer on 127.0.0.1:6379"
}

start_docker() {
    if docker info >/dev/null 2>&1; then
        default_bridge_present && return 0
        # The engine's default network names a bridge device that is gone (another dockerd in this
        # network namespace started with --bridge=none deletes docker0): image builds and
        # containers on it fail until the engine recreates it, which it does when it starts.
        say "the Docker engine's default bridge ($(default_bridge_name)) is missing: restarting the engine"
        local pid
        pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
        [ -n "$pid" ] || die "the default bridge is missing and the engine's pid is unknown (/var/run/docker.pid): restart dockerd"
        kill "$pid" || true
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
    command -v dockerd >/dev/null || apt_install docker.io
    say "starting the Docker engine"
    mkdir -p /var/log
    nohup dockerd >/var/log/raas-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
    die "the Docker engine did not start; see /var/log/raas-dockerd.log"
}

default_bridge_name() {
    docker network inspect bridge --format '{{index .Options "com.docker.network.bridge.name"}}' 2>/dev/null
}

default_bridge_present() {
    local name
    name="$(default_bridge_name)"
    [ -z "$name" ] || ip link show "$name" >/dev/null 2>&1
}

python_env() {
    local stamp="$VENV/.raas-installed"
    local want
    want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating the Python environment in $VENV"
        python3 -m venv "$VENV" || { apt_install python3-venv; python3 -m venv "$VENV"; }
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" -c 'import orchestrator' 2>/dev/null; then
        say "installing Python dependencies"
        "$VENV/bin/pip" install -q --upgrade pip >/dev/null
        "$VENV/bin/pip" install -q -e "$ROOT[dev]"
        echo "$want" >"$stamp"
    fi
}

apt_install git curl ca-certificates debootstrap iproute2 postgresql-client redis-tools docker-compose chromium docker-registry haproxy
start_postgres
start_redis
start_docker
python_env
"$ROOT/deploy/sandbox/build-offline.sh"
# The pinned agent CLIs (Claude Code, Codex, OpenCode) a worker mounts into its containers.
bash "$ROOT/scripts/install-harnesses.sh"
# The app image's base (Debian trixie), for the compose test's offline build; cached by its tag.
"$ROOT/deploy/build-app-offline.sh" --base-only
say "ready"
