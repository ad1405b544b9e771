#!/usr/bin/env bash
set -eu
cat > require_env.sh <<'SH'
#!/usr/bin/env bash
# require_env.sh NAME...: fail unless every named variable is set and not empty.
if [ $# -eq 0 ]; then
  echo "usage: require_env.sh NAME..." >&2
  exit 2
fi
missing=()
for name in "$@"; do
  [ -n "${!name-}" ] || missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
  joined=$(printf ', %s' "${missing[@]}")
  echo "missing: ${joined:2}" >&2
  exit 1
fi
SH
