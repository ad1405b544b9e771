#!/usr/bin/env bash
# summarize.sh LOGFILE: "CODE COUNT" per status code, most frequent first.
awk '{print $8}' "$1" | sort | uniq -c | sort -r | awk '{print $2, $1}'
