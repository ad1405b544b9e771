#!/usr/bin/env bash
set -eu
cat > summarize.sh <<'SH'
#!/usr/bin/env bash
# summarize.sh LOGFILE: "CODE COUNT" per status code, most frequent first.
awk '$9 ~ /^[0-9][0-9][0-9]$/ {print $9}' "$1" | sort | uniq -c | sort -k1,1nr -k2,2n | awk '{print $2, $1}'
SH
