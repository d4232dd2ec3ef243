#!/bin/sh
# Tries every .hlo file of XLA's repository with podsim's reader (issue 23,
# doc/hlo.md "XLA's own .hlo files"): read, print, read the print, print
# again; a file round-trips when both prints are the same bytes. Prints one
# line per file that does not (its path and podsim's error), then the counts.
#
#   PODSIM=build/podsim sh tests/xla_hlo_roundtrip.sh XLA
#
# XLA is a checkout of github.com/openxla/xla, or a bare git directory of it
# (read with git show, as the search tool's fetch gives it). Not run by make
# check: it needs that repository.
set -u
: "${PODSIM:?PODSIM must point to the podsim binary}"
src=${1:?usage: xla_hlo_roundtrip.sh XLA_CHECKOUT_OR_GIT_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -d "$src/.git" ] || [ ! -f "$src/HEAD" ]; then
  (cd "$src" && find . -name '*.hlo' -type f | sed 's|^\./||' | LC_ALL=C sort) >"$tmp/list"
  get () { cat "$src/$1"; }
else
  git --git-dir="$src" ls-tree -r --name-only HEAD | grep '\.hlo$' | LC_ALL=C sort >"$tmp/list"
  get () { git --git-dir="$src" show "HEAD:$1"; }
fi
total=0 ok=0 unread=0 unfixed=0 absent=0
while IFS= read -r f; do
  total=$((total + 1))
  # a snapshot may list a large file without holding its content: that
  # file is not tried, and is counted apart
  if ! get "$f" >"$tmp/in.hlo" 2>/dev/null; then
    absent=$((absent + 1))
    printf '%s\t%s\n' "$f" "not tried: its content is not in the checkout or git directory"
    continue
  fi
  if ! "$PODSIM" hlo "$tmp/in.hlo" >"$tmp/p1.hlo" 2>"$tmp/err"; then
    unread=$((unread + 1))
    printf '%s\t%s\n' "$f" "$(head -n 1 "$tmp/err" | sed "s|$tmp/in.hlo|FILE|")"
    continue
  fi
  if ! "$PODSIM" hlo "$tmp/p1.hlo" >"$tmp/p2.hlo" 2>"$tmp/err" || ! cmp -s "$tmp/p1.hlo" "$tmp/p2.hlo"; then
    unfixed=$((unfixed + 1))
    printf '%s\t%s\n' "$f" "printed text does not read back the same: $(head -n 1 "$tmp/err")"
    continue
  fi
  ok=$((ok + 1))
done <"$tmp/list"
echo "$ok of $total .hlo files round-trip; $unread do not read, $unfixed do not print as a fixed point, $absent not tried (content absent)"
