#!/bin/sh
# Installs the Debian packages axlc builds, tests and runs with.
# Needs root (apt-get); does nothing for packages already installed. slurmctld, slurmd,
# slurm-client and munge are for the tests that start a one-node Slurm cluster
# (tests/mpi/slurm.sh), which skip where they are missing.
set -eu
pkgs="build-essential cmake pkg-config clang lld llvm-dev libclang-dev libclang-rt-dev
  libjson-c-dev libcunit1-dev libopenblas-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev libopenmpi-dev openmpi-bin
  fortunes-min fortunes python3 python3-numpy python3-torch librsvg2-bin clang-format
  slurmctld slurmd slurm-client munge"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
