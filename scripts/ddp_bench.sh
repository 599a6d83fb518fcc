#!/usr/bin/env bash
# The issue-5 DDP / ZeRO benchmark: builds ddp_bench (Release, build-bench/), runs it under
# `mpirun -np 2`, runs PyTorch's DDP on gloo with the same step (bench/ddp_torch.py; skipped when
# /usr/bin/python3 has no torch), and prints the ratio PyTorch time / troupe time (target >= 2) and the
# overlap gain. Output goes to the terminal; with --append it is also appended as a section to
# bench/results.txt.
#   bash scripts/ddp_bench.sh [--append] [--quick] [--samples=N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

append=0
args=()
for a in "$@"; do
  case "$a" in
    --append) append=1 ;;
    *) args+=("$a") ;;
  esac
done
py_args=()
for a in "${args[@]+"${args[@]}"}"; do
  case "$a" in
    --quick) py_args+=(--quick) ;;
    --samples=*) py_args+=(--samples "${a#--samples=}") ;;
  esac
done

build="build-bench"
gen=()
[[ -f "$build/CMakeCache.txt" ]] || gen=(-G Ninja)
cmake "${gen[@]}" -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_BUILD_BENCH=ON -DTROUPE_BUILD_TESTS=OFF \
  -DTROUPE_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j 2 --target ddp_bench >/dev/null

export OMPI_MCA_btl_vader_single_copy_mechanism=none
python=/usr/bin/python3
out=$(mktemp)
trap 'rm -f "$out"' EXIT

{
  echo "## ddp_bench (mpirun -np 2) and ddp_torch.py  $(date -u '+%Y-%m-%d %H:%M:%S UTC')  git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cpus; uptime:$(uptime | sed 's/.*load average/ load average/')"
  echo
  mpirun --allow-run-as-root --oversubscribe -np 2 "$build/bench/ddp_bench" "${args[@]+"${args[@]}"}" 2>&1 |
    grep -v '^\[troupe\] rank'
  echo
  if "$python" -c "import torch" 2>/dev/null; then
    "$python" bench/ddp_torch.py "${py_args[@]+"${py_args[@]}"}" 2>&1
  else
    echo "ddp_torch.py skipped: $python has no torch"
  fi
} | tee "$out"

troupe_ms=$(awk '/^troupe_ddp_ms_per_step/ {print $2}' "$out")
flat_ms=$(awk '/^troupe_ddp_one_bucket_ms_per_step/ {print $2}' "$out")
torch_ms=$(awk '/^torch_ddp_ms_per_step/ {print $2}' "$out")
{
  echo
  if [[ -n "$troupe_ms" && -n "$flat_ms" ]]; then
    awk -v b="$troupe_ms" -v f="$flat_ms" 'BEGIN {
      printf "overlap gain: one bucket %.2f ms -> default buckets %.2f ms per step (%.1f%%)\n", f, b, 100 * (f - b) / f }'
  fi
  if [[ -n "$troupe_ms" && -n "$torch_ms" ]]; then
    awk -v t="$troupe_ms" -v p="$torch_ms" 'BEGIN {
      r = p / t; printf "ratio PyTorch DDP / troupe DDP: %.2f ms / %.2f ms = %.2f (target >= 2: %s)\n", p, t, r,
      (r >= 2 ? "PASS" : "MISS") }'
    # The fastest sample of each side: less sensitive to other processes on a shared machine.
    tmin=$(awk '/^  DDP buckets 1\+25 MiB \(overlapped, default\)/ && /ms\/step/ {match($0, /\(min [0-9.]+/); print substr($0, RSTART + 5, RLENGTH - 5)}' "$out")
    pmin=$(awk '/^  DDP \(defaults, gloo\)/ && /ms\/step/ {match($0, /\(min [0-9.]+/); print substr($0, RSTART + 5, RLENGTH - 5)}' "$out")
    if [[ -n "$tmin" && -n "$pmin" ]]; then
      awk -v t="$tmin" -v p="$pmin" 'BEGIN {
        printf "ratio of the fastest samples: %.2f ms / %.2f ms = %.2f\n", p, t, p / t }'
    fi
  else
    echo "ratio PyTorch DDP / troupe DDP: n/a"
  fi
  echo "uptime at end:$(uptime | sed 's/.*load average/ load average/')"
} | tee -a "$out"

if [[ $append -eq 1 ]]; then
  { echo; cat "$out"; } >>bench/results.txt
  echo "ddp_bench.sh: appended to bench/results.txt"
fi
