#!/usr/bin/env bash
# require_env.sh NAME...: fail unless every named variable is set and not empty.
echo "not implemented" >&2
exit 99
