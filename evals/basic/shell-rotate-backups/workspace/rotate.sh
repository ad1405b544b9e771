#!/usr/bin/env bash
# rotate.sh DIR KEEP: keep the KEEP newest backup-*.tar.gz files in DIR, delete the others.
dir=$1
keep=$2
count=0
for f in $(ls $dir/backup-*.tar.gz | sort); do
  count=$((count + 1))
  if [ $count -gt $keep ]; then
    rm $f
  fi
done
