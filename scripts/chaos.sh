#!/usr/bin/env bash
# The chaos soak (docs/faults.md, "The chaos soak"): projects run on a cluster of their own while
# its pieces are broken at random; prints the table of checks, exits 1 if one failed.
#   bash scripts/chaos.sh [--minutes M] [--projects N] [--seed S] [--docker cut|restart] ...
# It starts its own Postgres and Redis; --docker restart restarts the machine's dockerd: run it alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${RAAS_VENV:-$ROOT/.venv}"
exec "$VENV/bin/python" -m tests.chaos "$@"
