#!/usr/bin/env bash
# Build the benchmarks (Release, build-bench/, with libtorch for the comparisons) and run every one;
# the output goes to the terminal and to bench/results.txt (committed).
#   bash scripts/bench.sh [args for every benchmark, e.g. --benchmark_filter=matmul]
set -euo pipefail
export TROUPE_ACTOR_LANE=${TROUPE_ACTOR_LANE:-mpi}  # the benches time the lane (the default) beside CAF
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh --with-torch

build="build-bench"
gen=()
[[ -f "$build/CMakeCache.txt" ]] || gen=(-G Ninja)
cmake "${gen[@]}" -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DTROUPE_SANITIZE=OFF \
  -DTROUPE_BUILD_BENCH=ON \
  -DTROUPE_BUILD_TESTS=OFF \
  -DTROUPE_BUILD_EXAMPLES=OFF
cmake --build "$build" -j "$(nproc)"

mapfile -t benches < <(find "$build/bench" -maxdepth 1 -type f -executable | sort)
if [[ ${#benches[@]} -eq 0 ]]; then
  echo "bench.sh: no benchmarks built (bench/*.cpp)" >&2
  exit 1
fi

failed=$(mktemp)
trap 'rm -f "$failed"' EXIT
{
  echo "# troupe benchmarks  $(date -u '+%Y-%m-%d %H:%M:%S UTC')  git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "# $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(nproc) cpus"
  for b in "${benches[@]}"; do
    echo
    echo "## $(basename "$b")"
    rc=0
    "$b" "$@" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
      echo "!! $(basename "$b") exited with $rc"
      basename "$b" >>"$failed"
    fi
  done
} | tee bench/results.txt
if [[ -s $failed ]]; then
  echo "bench.sh: failed: $(tr '\n' ' ' <"$failed")" >&2
  exit 1
fi
