#!/usr/bin/env bash
# The hidden check, run with cwd = the final workspace; the tests live in $RAAS_TESTS_DIR
# (a copy outside the workspace). Exit 0 = solved.
set -u
tests="${RAAS_TESTS_DIR:-$(cd "$(dirname "$0")" && pwd)}"
exec python3 -B "$tests/test_hidden.py" -v
