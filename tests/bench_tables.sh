#!/bin/sh
# Benchmark (issue 26): `podsim tables speech` (18 Conformer rows, each a
# child `podsim run`): wall time (goal: 30 s or less) and the CPU of the
# command and its children. Figures only.
set -u
: "${PODSIM:?}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/env time -f "%U %S %e %M" -o "$TMP/time" "$PODSIM" tables speech -q --csv >"$TMP/out" || exit 1
read -r user sys wall rss <"$TMP/time"
echo "bench_tables: podsim tables speech: wall $wall s, cpu $(echo "$user $sys" | awk '{print $1 + $2}') s" \
  "(with its children), $(($(wc -l <"$TMP/out") - 1)) rows; goal: 30 s wall or less"
