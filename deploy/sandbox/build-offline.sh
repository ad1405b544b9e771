#!/usr/bin/env bash
# Build the sandbox image with no container registry: debootstrap a minimal Debian bookworm
# from the apt mirror this host already uses, then `docker import` it. Produces the same
# image as the Dockerfile beside this script (user agent 1000:1000, WORKDIR /workspace).
#
# Usage: build-offline.sh [TAG]   (default: $RAAS_SANDBOX_IMAGE or constellation-sandbox:bookworm)
#
# deploy/build-app-offline.sh reuses it for the app image's base, with another suite and package
# list (RAAS_DEBIAN_SUITE, RAAS_DEBOOTSTRAP_PACKAGES), taken from the mirror that serves the
# host's own suite (RAAS_DEBIAN_MIRROR_SUITE) when the host has no apt source for it.
set -euo pipefail

TAG="${1:-${RAAS_SANDBOX_IMAGE:-constellation-sandbox:bookworm}}"
SUITE="${RAAS_DEBIAN_SUITE:-bookworm}"
PACKAGES="${RAAS_DEBOOTSTRAP_PACKAGES:-bash,coreutils,git,python3,ripgrep,ca-certificates,procps}"
MIRROR_SUITE="${RAAS_DEBIAN_MIRROR_SUITE:-$SUITE}"
ME="$(basename "$0")"

die() { echo "$ME: error: $*" >&2; exit 1; }
say() { echo "$ME: $*" >&2; }
trap 'die "building $TAG failed at line $LINENO: $BASH_COMMAND"' ERR

if docker image inspect "$TAG" >/dev/null 2>&1; then
    say "image $TAG is already built (cached); nothing to do"
    exit 0
fi
[[ $EUID -eq 0 ]] || die "debootstrap needs root; run as root (sudo $0)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"

# Print "URI KEYRING" of the first apt source for $MIRROR_SUITE itself (not -updates/-security),
# read from one-line sources.list files and deb822 *.sources files alike.
find_mirror() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        awk -v suite="$MIRROR_SUITE" '
            $1 == "deb" {
                i = 2; kr = "-"
                if ($2 ~ /^\[/) {
                    for (; i <= NF; i++) {
                        if ($i ~ /signed-by=/) { kr = $i; sub(/.*signed-by=/, "", kr); sub(/\]$/, "", kr) }
                        if ($i ~ /\]$/) { i++; break }
                    }
                }
                if ($(i + 1) == suite) { print $i, kr; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        awk -v suite="$MIRROR_SUITE" '
            function flush() {
                if (deb && uri != "" && has) { print uri, (kr == "" ? "-" : kr); found = 1; exit }
                deb = 0; uri = ""; kr = ""; has = 0
            }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]*#/ { next }
            tolower($1) == "types:" { for (j = 2; j <= NF; j++) if ($j == "deb") deb = 1 }
            tolower($1) == "uris:" { uri = $2 }
            tolower($1) == "suites:" { for (j = 2; j <= NF; j++) if ($j == suite) has = 1 }
            tolower($1) == "signed-by:" { kr = $2 }
            END { if (!found) flush() }' "$f"
    done
}

read -r MIRROR KEYRING < <(find_mirror | head -n 1) || true
[[ -n ${MIRROR:-} ]] || die "no apt source for '$MIRROR_SUITE' found in /etc/apt/sources.list or /etc/apt/sources.list.d/"
KEYRING_ARGS=()
if [[ ${KEYRING:-"-"} != "-" && -r $KEYRING ]]; then
    KEYRING_ARGS=(--keyring="$KEYRING")
fi

WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/raas-sandbox.XXXXXX")"
ROOTFS="$WORK/rootfs"
LOG="$WORK/debootstrap.log"
cleanup() {
    # debootstrap may leave /proc, /sys or /dev bind mounts behind when it fails.
    local m
    while read -r m; do umount -l "$m" 2>/dev/null || true; done \
        < <(findmnt -rn -o TARGET | grep -F "$ROOTFS" | sort -r)
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

say "debootstrapping $SUITE from $MIRROR into $ROOTFS (a few minutes)"
if ! debootstrap --variant=minbase --include="$PACKAGES" "${KEYRING_ARGS[@]}" \
        "$SUITE" "$ROOTFS" "$MIRROR" >"$LOG" 2>&1; then
    tail -n 20 "$LOG" >&2
    die "debootstrap of $SUITE from $MIRROR failed (last lines above)"
fi

say "adding user agent (1000:1000) and /workspace"
chroot "$ROOTFS" groupadd --gid 1000 agent
chroot "$ROOTFS" useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash agent
mkdir -p "$ROOTFS/workspace"
chown 1000:1000 "$ROOTFS/workspace"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
    "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/*

say "importing into docker as $TAG"
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'USER agent' \
    --change 'WORKDIR /workspace' \
    --change 'CMD ["bash"]' \
    - "$TAG" >/dev/null || die "docker import of $TAG failed"
say "built $TAG"
