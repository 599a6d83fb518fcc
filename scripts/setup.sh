#!/usr/bin/env bash
# Installs the build dependencies on Debian 12 (idempotent; run as root or with sudo). python3-protobuf:
# tests/metrics/check_tfevents.py reads TensorBoard event files with it (the test skips without it).
# libcpp-httplib-dev serves the live page (--dashboard), libjs-chart.js draws its curves (served from
# /usr/share/javascript/chart.js at run time); chromium only loads that page in a test (it skips without).
# iproute2 and nftables: tests/multihost makes its test hosts with `ip netns` and shapes a link with tc/nft.
# libcli11-dev parses every program's command line (tools/cli.h); clang-14 and libclang-rt-14-dev
# (--with-fuzz) build the libFuzzer entry points (scripts/fuzz.sh).
#   bash scripts/setup.sh                 libraries, tests
#   bash scripts/setup.sh --with-torch    + libtorch-dev (benchmarks/demo compare against libtorch)
#   bash scripts/setup.sh --with-browser  + chromium (scripts/test.sh: the dashboard's browser test)
#   bash scripts/setup.sh --with-fuzz     + clang-14 and its libFuzzer runtime (scripts/fuzz.sh)
# Does nothing (no apt-get at all) when every package is already installed.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

with_torch=0
with_browser=0
with_fuzz=0
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --with-browser) with_browser=1 ;;
    --with-fuzz) with_fuzz=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build git pkg-config ccache
  libopenblas-dev
  libopenmpi-dev openmpi-bin
  libcaf-dev libssl-dev libcereal-dev libzip-dev
  googletest libgtest-dev libgmock-dev
  libbenchmark-dev
  python3-protobuf
  libcpp-httplib-dev libjs-chart.js
  iproute2 nftables
  libcli11-dev
)
if [[ $with_torch == 1 ]]; then
  packages+=(libtorch-dev)
fi
if [[ $with_browser == 1 ]]; then
  packages+=(chromium)
fi
if [[ $with_fuzz == 1 ]]; then
  packages+=(clang-14 libclang-rt-14-dev)
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: not a Debian system (no dpkg-query); install these yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup.sh: missing packages (${missing[*]}) and not root and no sudo" >&2
    exit 1
  fi
  sudo=(sudo env DEBIAN_FRONTEND=noninteractive)
fi

echo "setup.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
