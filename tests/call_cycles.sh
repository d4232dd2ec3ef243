#!/bin/sh
# Calls inside a module run one way: the engine or driver file calls its op
# or handler files, and those call only base files (interp_ctx.c,
# spmd_value.c, spmd_build.c, propagate_merge.c, autodiff_build.c, ...),
# never back into the file that dispatches to them (doc/architecture.md,
# "Private headers"). The same holds for whole folders whose files are
# many modules: models/ (the family registry above the families' files,
# above the models, above the layer library's base) and driver/. Read from
# the built objects: file A depends on file B
# when A uses a symbol B defines (nm); tsort reports a loop among them.
# Skipped (exit 77) where nm, tsort or the objects are missing.
set -u
: "${PS_BUILDDIR:?}"
command -v nm >/dev/null 2>&1 && command -v tsort >/dev/null 2>&1 || exit 77
status=0
for group in partitioner/interp/interp partitioner/interp/shrink partitioner/interp/verify \
             partitioner/spmd/spmd partitioner/propagate/propagate partitioner/builder/autodiff \
             models/ driver/libpodsim_driver_la-; do
  set -- "$PS_BUILDDIR/$group"*.o
  [ -e "$1" ] || exit 77
  edges=$(for a in "$@"; do
    for b in "$@"; do
      [ "$a" = "$b" ] && continue
      nm "$a" | awk '$1 == "U" { print $2 }' | sort -u >"$PS_BUILDDIR/.cc_uses.$$"
      nm "$b" | awk 'NF == 3 && $2 ~ /^[TDBR]$/ { print $3 }' | sort -u >"$PS_BUILDDIR/.cc_defs.$$"
      [ -n "$(comm -12 "$PS_BUILDDIR/.cc_uses.$$" "$PS_BUILDDIR/.cc_defs.$$")" ] \
        && echo "$(basename "$a" .o) $(basename "$b" .o)"
    done
  done)
  rm -f "$PS_BUILDDIR/.cc_uses.$$" "$PS_BUILDDIR/.cc_defs.$$"
  if ! printf '%s\n' "$edges" | tsort >/dev/null 2>"$PS_BUILDDIR/.cc_err.$$"; then
    echo "FAIL: files of $group call each other in a loop:" >&2
    sed 's/^/  | /' "$PS_BUILDDIR/.cc_err.$$" >&2
    status=1
  fi
  rm -f "$PS_BUILDDIR/.cc_err.$$"
done
exit $status
