#!/usr/bin/env bash
# The benchmarks (not part of the test run): each prints its figures as ratios against the raw
# baseline measured in the same run. Arguments go to every benchmark (e.g. --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
PY="${RAAS_VENV:-$ROOT/.venv}/bin/python"
for bench in bench_sandbox bench_coordinator bench_load bench_density bench_gateway bench_harness bench_triggers \
    bench_dashboard bench_dashboard_browser bench_eval bench_environment bench_workspace_store bench_replicas; do
    echo "== $bench"
    "$PY" -m "tests.benchmarks.$bench" "$@"
done
