#!/usr/bin/env bash
set -eu
cat > rotate.sh <<'SH'
#!/usr/bin/env bash
# rotate.sh DIR KEEP: keep the KEEP newest backup-*.tar.gz files in DIR, delete the others.
set -eu
dir=$1
keep=${2-}
case $keep in
  '' | *[!0-9]*) echo "rotate.sh: KEEP must be a non-negative integer, got '$keep'" >&2; exit 2 ;;
esac
shopt -s nullglob
backups=("$dir"/backup-*.tar.gz)   # glob order is sorted: oldest first
remove=$((${#backups[@]} - keep))
for ((i = 0; i < remove; i++)); do
  rm -- "${backups[$i]}"
done
SH
