#!/bin/sh
# Sets podsim up on a fresh Debian 12 machine (run as root): installs the
# Debian packages the build needs, builds into build/, then runs podsim's main
# job. Safe to run again; it only installs what is missing.
#   ./setup.sh            install, build, run the main job
#   ./setup.sh --no-run   install and build only
set -eu
cd "$(dirname "$0")"

PACKAGES="build-essential autoconf automake libtool pkg-config \
libsimgrid-dev libglib2.0-dev check zlib1g-dev libjson-glib-dev time \
clang libclang-rt-14-dev libcairo2-dev slurm-wlm munge chromium"

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install packages (try: sudo $0)" >&2
    exit 2
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure -q
make -j"$(nproc)" >/dev/null
cd ..
echo "setup: built build/podsim"

[ "${1:-}" = "--no-run" ] && exit 0
# podsim's main job (see README).
exec ./build/podsim run --preset DenseLm128B32x32
