#!/usr/bin/env bash
# Build the app image (coordinator, workers, Flower) with no container registry:
# deploy/Dockerfile.offline, FROM a Debian base made by debootstrap (deploy/sandbox/build-offline.sh
# with another suite), the project and its dependencies installed from wheels.
#
# Why not FROM the sandbox image: bookworm's python3 is 3.11.2, and the app needs 3.11.4 or later
# (shared/archive.py extracts with tarfile's data filter, PEP 706). Debian trixie has 3.13.
#
# Usage: build-app-offline.sh [--base-only] [TAG]   (default TAG: constellation-app:latest, the
#        tag compose.yaml uses; --base-only builds only the base image, cached by its tag)
#
# Only pip reaches the network, for the Python package index: the dependencies' wheels are made by
# pip inside the base image (so environment markers are those of its Python), once per
# pyproject.toml, and cached in $RAAS_WHEEL_CACHE (default ~/.cache/raas-app-wheels). The image
# itself is built with --network none; a rebuild after a code change makes only the project's
# wheel and reuses the dependency layer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_ONLY=0
if [[ ${1:-} == --base-only ]]; then BASE_ONLY=1; shift; fi
TAG="${1:-constellation-app:latest}"
BASE="${RAAS_APP_BASE_IMAGE:-constellation-app-base:trixie}"
CACHE="${RAAS_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/raas-app-wheels}"
# The host's trust store goes into the wheel-making container, for networks that inspect TLS.
CA_BUNDLE="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
ME="$(basename "$0")"

die() { echo "$ME: error: $*" >&2; exit 1; }
say() { echo "$ME: $*" >&2; }

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    say "building the base image $BASE (debootstrap; a few minutes, once)"
    RAAS_DEBIAN_SUITE=trixie RAAS_DEBIAN_MIRROR_SUITE=bookworm \
        RAAS_DEBOOTSTRAP_PACKAGES=bash,coreutils,git,python3,ca-certificates,procps \
        "$ROOT/deploy/sandbox/build-offline.sh" "$BASE"
fi
[[ $BASE_ONLY == 1 ]] && exit 0

PIP_RUNNER="${RAAS_VENV:-$ROOT/.venv}/bin/python"
[[ -x $PIP_RUNNER ]] || PIP_RUNNER=python3
"$PIP_RUNNER" -m pip --version >/dev/null 2>&1 || die "$PIP_RUNNER has no pip"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/raas-app.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src" "$WORK/context/wheels/deps" "$WORK/context/wheels/project"
# pip's output only when it fails (a machine's pip configuration may warn on every run).
quietly() { "$@" >"$WORK/log" 2>&1 || { cat "$WORK/log" >&2; die "failed: $*"; }; }
# What deploy/Dockerfile copies, copied out of the tree so that pip's build leaves nothing in it.
tar -C "$ROOT" --exclude=__pycache__ -c pyproject.toml README.md shared orchestrator workers \
    | tar -C "$WORK/src" -x

py_version="$(docker run --rm --network none --user 0 "$BASE" python3 -c \
    'import sys; print("%d.%d.%d" % sys.version_info[:3])')" || die "$BASE has no python3"
deps="$CACHE/py$py_version-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [[ ! -e $deps/.complete ]]; then
    say "making the dependencies' wheels for Python $py_version into $deps (once per pyproject.toml)"
    rm -rf "$deps" && mkdir -p "$deps/build"
    quietly "$PIP_RUNNER" -m pip download --no-deps --dest "$deps" pip
    pip_wheel="$(basename "$(compgen -G "$deps/pip-*.whl" | head -n 1)")"
    ca_mount=()
    [[ -r $CA_BUNDLE ]] && ca_mount=(-v "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
    backend="$("$PIP_RUNNER" -c 'import sys, tomllib
print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$ROOT/pyproject.toml")"
    # The build requirements ($BACKEND) are split into words by the container's shell.
    quietly docker run --rm --user "$(id -u):$(id -g)" "${ca_mount[@]}" \
        -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e HOME=/tmp \
        -e PIP="/wheels/$pip_wheel/pip" -e BACKEND="$backend" \
        -v "$deps:/wheels" -v "$WORK/src:/src" "$BASE" sh -c '
            python3 "$PIP" wheel --no-cache-dir --wheel-dir /wheels /src &&
            python3 "$PIP" wheel --no-cache-dir --wheel-dir /wheels/build $BACKEND'
    rm -f "$deps"/constellation_raas-*.whl
    touch "$deps/.complete"
fi
cp "$deps"/*.whl "$WORK/context/wheels/deps/"

say "making the project's wheel"
quietly "$PIP_RUNNER" -m pip wheel --no-deps --no-index --find-links "$deps/build" \
    --wheel-dir "$WORK/context/wheels/project" "$WORK/src"

say "building $TAG from $BASE"
cp "$ROOT/deploy/Dockerfile.offline" "$WORK/context/Dockerfile"
quietly docker build --network none --build-arg "BASE=$BASE" -t "$TAG" "$WORK/context"
say "built $TAG"
