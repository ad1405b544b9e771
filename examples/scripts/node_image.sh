#!/usr/bin/env bash
# Build raas-node-demo:bookworm, the base image of examples/node-repo, with no registry: the
# sandbox image plus this host's node binary and npm (a worker host never pulls an image).
#
# Usage: node_image.sh [TAG]   (default raas-node-demo:bookworm; needs the sandbox image and node)
set -euo pipefail
TAG="${1:-raas-node-demo:bookworm}"
BASE="${RAAS_SANDBOX_IMAGE:-constellation-sandbox:bookworm}"
ME="$(basename "$0")"
die() { echo "$ME: error: $*" >&2; exit 1; }

if docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "$ME: image $TAG is already built (cached); nothing to do" >&2
    exit 0
fi
docker image inspect "$BASE" >/dev/null 2>&1 || die "the sandbox image $BASE is missing; run deploy/sandbox/build-offline.sh"
NODE="$(command -v node)" || die "no node on this host (apt-get install nodejs)"
NPM_DIR="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
[[ -f "$NPM_DIR/bin/npm-cli.js" ]] || die "npm's own directory was not found beside $(command -v npm)"
# node must run on the image's libc: only glibc and libstdc++, which bookworm has.
! ldd "$NODE" 2>/dev/null | grep -q libnode || die "$NODE links a shared libnode; use a self-contained node build"

CONTEXT="$(mktemp -d)"
trap 'rm -rf "$CONTEXT"' EXIT
cp "$NODE" "$CONTEXT/node"
cp -r "$NPM_DIR" "$CONTEXT/npm"
cat >"$CONTEXT/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
USER root
RUN ["/usr/local/bin/node", "-e", "require('fs').symlinkSync('../lib/node_modules/npm/bin/npm-cli.js', '/usr/local/bin/npm')"]
USER agent
DOCKERFILE
docker build --pull=false --network none -q -t "$TAG" "$CONTEXT" >/dev/null
echo "$ME: built $TAG ($(docker run --rm --network none "$TAG" node --version), npm $(docker run --rm --network none "$TAG" npm --version))" >&2
