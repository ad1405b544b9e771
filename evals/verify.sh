#!/usr/bin/env bash
# Check an eval suite's tasks in the real sandbox image: for each task, in throwaway
# `docker run --rm --network none` containers on a copy of its workspace/, the hidden
# tests/test.sh must FAIL on the unsolved tree, and PASS after solution/solve.sh.
#
#   evals/verify.sh                 every task of evals/basic
#   evals/verify.sh DIR...          these task folders, or suites (folders holding suite.toml)
#
# The tests are mounted outside the workspace (RAAS_TESTS_DIR=/eval/tests), read-only, as an
# eval run gives them. Prints one line per task; exits 1 if any task is broken, 2 on bad input.
# RAAS_VERIFY_LABEL (key=value) labels the containers, so a test run can find and remove them.
set -u
image="${RAAS_SANDBOX_IMAGE:-constellation-sandbox:bookworm}"
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -gt 0 ] || set -- "$here/basic"

tasks=()
for arg in "$@"; do
  if [ -f "$arg/suite.toml" ]; then
    for dir in "$arg"/*/; do [ -f "$dir/task.toml" ] && tasks+=("${dir%/}"); done
  elif [ -f "$arg/task.toml" ]; then
    tasks+=("${arg%/}")
  else
    echo "verify.sh: $arg is neither a task (no task.toml) nor a suite (no suite.toml); give one of them" >&2
    exit 2
  fi
done
docker image inspect "$image" >/dev/null 2>&1 || {
  echo "verify.sh: no image $image; build it with scripts/setup.sh (or set RAAS_SANDBOX_IMAGE)" >&2
  exit 2
}

# Root on the host: run as the image's own user (uid 1000, as the agent does) on a copy it owns;
# anyone else: as themselves, so the copy stays theirs to delete.
user=()
[ "$(id -u)" = 0 ] || user=(--user "$(id -u):$(id -g)" -e HOME=/tmp)

# in_sandbox COPY SCRIPT: run SCRIPT (a path under /eval) with cwd = the copied workspace.
in_sandbox() {
  docker run --rm --network none --label "${RAAS_VERIFY_LABEL:-raas.eval-verify=1}" "${user[@]}" \
    -e RAAS_TESTS_DIR=/eval/tests \
    -v "$1/workspace:/workspace" -v "$1/tests:/eval/tests:ro" -v "$1/solution:/eval/solution:ro" \
    -w /workspace "$image" bash "$2" >"$1/log" 2>&1
}

broken=0
for task in "${tasks[@]}"; do
  name="$(basename "$task")"
  for part in workspace tests/test.sh solution/solve.sh instruction.md; do
    [ -e "$task/$part" ] || { echo "BROKEN $name: no $part"; broken=1; continue 2; }
  done
  copy="$(mktemp -d)"
  cp -a "$task/workspace" "$task/tests" "$task/solution" "$copy/"
  [ "$(id -u)" = 0 ] && chown -R 1000:1000 "$copy"
  if in_sandbox "$copy" /eval/tests/test.sh; then
    echo "BROKEN $name: the unsolved workspace passes tests/test.sh"; broken=1
  elif ! in_sandbox "$copy" /eval/solution/solve.sh; then
    echo "BROKEN $name: solution/solve.sh failed:"; tail -n 20 "$copy/log"; broken=1
  elif ! in_sandbox "$copy" /eval/tests/test.sh; then
    echo "BROKEN $name: tests/test.sh fails after solution/solve.sh:"; tail -n 20 "$copy/log"; broken=1
  else
    echo "ok     $name"
  fi
  rm -rf "$copy"
done
exit "$broken"
