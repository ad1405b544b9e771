#!/usr/bin/env bash
# The pinned agent CLIs (Claude Code, Codex, OpenCode) into the harness cache, from npm:
#   bash scripts/install-harnesses.sh [NAME...]      (default: all of them)
# Each lands in $RAAS_HARNESS_CACHE/NAME-VERSION (default /var/cache/constellation/harnesses),
# which workers bind-mount read-only into their containers. The versions come from
# shared/harnesses.py (python -m shared.harnesses --print-pins), the one source of truth; the
# tarballs' sha512 is pinned here (from `npm view PKG@VER dist.integrity`). Idempotent and fast
# when the cache is already right: a harness whose binary prints its pinned version is left alone.
# A harness is unpacked into a temporary directory beside the cache and moved into place, so a
# worker never sees half a binary. Called by scripts/setup.sh; runs as root on a fresh Debian.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RAAS_VENV:-$ROOT/.venv}"
PYTHON="${RAAS_PYTHON:-$VENV/bin/python}"
CACHE="${RAAS_HARNESS_CACHE:-/var/cache/constellation/harnesses}"

declare -A INTEGRITY=(
    ["@anthropic-ai/claude-code-linux-x64@2.1.330"]="sha512-9Gn+V7DtJ8M1nztP9CeDVl9g3RtrepI7rOFTyPRRnZe8D6zebIHKmC7OvBauucuAP0X0k85SDN/LPVZyjsGezQ=="
    ["@openai/codex@0.169.0-linux-x64"]="sha512-o05NyAOCDygSPRo1yinzxvkRSdmsZyBD9E7mbpmjRanSfM8lypqWtQgEo4XfNkwhuCR2aFu8mlGOsQGFXVbVww=="
    ["opencode-linux-x64@1.18.33"]="sha512-q/t/3p2CTxOT9y2kvjesb/LZab2+1eqlhhWA02Be6mjTtmYtNBcBsrI5yDo4Fw7ZSPBW2oyMIGMNRqiKQjiAWw=="
)

say() { printf '\033[1m[harnesses]\033[0m %s\n' "$*" >&2; }
die() { printf '[harnesses] error: %s\n' "$*" >&2; exit 1; }

WORK=""  # the install under way, removed however the script ends
trap 'rm -rf "${WORK:-}"' EXIT

[ -x "$PYTHON" ] || PYTHON=python3
PINS="$(cd "$ROOT" && "$PYTHON" -m shared.harnesses --print-pins)" \
    || die "cannot read the pins (python -m shared.harnesses --print-pins); run bash scripts/setup.sh first"

prints_version() {  # BINARY WANT: does BINARY --version print WANT?
    [ -x "$1" ] && [ "$("$1" --version </dev/null 2>/dev/null | tr -d '\r' | sed 's/[[:space:]]*$//')" = "$2" ]
}

need_npm() {
    command -v npm >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "npm is missing; install nodejs and npm (apt-get install nodejs npm) or run as root"
    say "installing nodejs and npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || say "apt-get update failed; trying with the cached package lists"
    apt-get install -y -qq nodejs npm >/dev/null
}

integrity_of() {  # FILE -> sha512-BASE64, as npm's dist.integrity spells it
    "$PYTHON" -c 'import base64, hashlib, sys
print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$1"
}

install_one() {  # NAME SPEC DIR BINARY PRINTS
    local name="$1" spec="$2" dir="$3" binary="$4" prints="$5"
    if prints_version "$CACHE/$dir/$binary" "$prints"; then
        say "$name: $prints already in $CACHE/$dir"
        return 0
    fi
    local want="${INTEGRITY[$spec]:-}"
    [ -n "$want" ] || die "$name: no sha512 pinned for $spec in $0 (npm view $spec dist.integrity)"
    need_npm
    mkdir -p "$CACHE"
    WORK="$(mktemp -d "$CACHE/.install-$name-XXXXXX")"
    local tmp="$WORK"
    say "$name: fetching $spec"
    local tarball
    tarball="$(cd "$tmp" && npm pack "$spec" --silent --cache "$tmp/npm-cache" | tail -n 1)"
    [ -f "$tmp/$tarball" ] || die "$name: npm pack $spec gave no tarball"
    local got
    got="$(integrity_of "$tmp/$tarball")"
    [ "$got" = "$want" ] || die "$name: $spec has integrity $got, want $want; not installed"
    mkdir "$tmp/unpacked"
    tar xzf "$tmp/$tarball" -C "$tmp/unpacked" --strip-components=1 --no-same-owner
    chmod -R a+rX "$tmp/unpacked"
    prints_version "$tmp/unpacked/$binary" "$prints" \
        || die "$name: $tmp/unpacked/$binary does not print '$prints'"
    if [ -e "$CACHE/$dir" ]; then mv "$CACHE/$dir" "$tmp/old"; fi
    mv "$tmp/unpacked" "$CACHE/$dir"
    rm -rf "$tmp"
    WORK=""
    say "$name: $prints installed in $CACHE/$dir"
}

known=" $(cut -d' ' -f1 <<<"$PINS" | tr '\n' ' ')"
for name in "$@"; do
    [[ "$known" == *" $name "* ]] || die "unknown harness '$name'; choices:${known% }"
done
while read -r name spec dir binary prints; do
    if [ $# -eq 0 ] || [[ " $* " == *" $name "* ]]; then
        install_one "$name" "$spec" "$dir" "$binary" "$prints"
    fi
done <<<"$PINS"
