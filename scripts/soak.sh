#!/usr/bin/env bash
# Soak: 8 oversubscribed ranks (mpirun) train with DDP and actors for MINUTES (tests/soak/soak_train.cpp);
# each rank's resident memory is sampled every 15 s and must not grow after the warm-up (the first
# quarter of the run, at least one minute): the largest sample after it may exceed the first sample
# after it by at most max(4 MiB, 3%). The job must end by itself (no hang: killed at MINUTES + 3 min)
# with every replica's parameters identical. Prints the samples and a verdict line; exit 0 when it holds.
#   bash scripts/soak.sh [MINUTES=10] [RANKS=8]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
minutes=${1:-10}
ranks=${2:-8}
if ! [[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 ]]; then echo "soak.sh: MINUTES must be a whole number >= 1, got '$minutes'" >&2; exit 2; fi
if ! [[ $ranks =~ ^[0-9]+$ && $ranks -ge 2 ]]; then echo "soak.sh: RANKS must be a whole number >= 2, got '$ranks'" >&2; exit 2; fi

bash scripts/setup.sh
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  launcher=()
fi
[[ -f build/CMakeCache.txt ]] || cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release -DTROUPE_BUILD_TESTS=ON "${launcher[@]}"
cmake --build build -j "$(nproc)" --target soak_train

log=$(mktemp /tmp/troupe-soak.XXXXXX)
limit=$((minutes * 60 + 180))
echo "soak: $ranks ranks, $minutes min, load $(cut -d' ' -f1-3 /proc/loadavg); log $log"
rc=0
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout --kill-after=20 "$limit" \
  mpirun --allow-run-as-root --oversubscribe -np "$ranks" build/tests/soak/soak_train \
  --seconds $((minutes * 60)) --sample 15 >"$log" 2>&1 || rc=$?
grep '^\[soak\]' "$log" || true
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "soak: FAIL, the job hung (still running after $limit s)"; tail -n 30 "$log"; exit 1
fi
if [[ $rc -ne 0 ]]; then echo "soak: FAIL, mpirun exited $rc"; tail -n 30 "$log"; exit 1; fi
grep -q 'replicas_identical=yes' "$log" || { echo "soak: FAIL, the replicas' parameters differ"; exit 1; }

# Growth after warm-up, per rank.
python3 - "$log" "$minutes" <<'EOF'
import re, sys
log, minutes = sys.argv[1], int(sys.argv[2])
rows = []
for line in open(log):
    m = re.match(r"\[soak\] sample \d+ t=([0-9.]+) steps=(\d+) rss_mb=([0-9.,]+)", line)
    if m:
        rows.append((float(m.group(1)), [float(x) for x in m.group(3).split(",")]))
warm = max(60.0, minutes * 60 / 4)
after = [r for r in rows if r[0] >= warm]
if len(after) < 2:
    print(f"soak: FAIL, only {len(after)} samples after the {warm:.0f} s warm-up")
    sys.exit(1)
bad = []
for rank in range(len(after[0][1])):
    first = after[0][1][rank]
    top = max(r[1][rank] for r in after)
    allowed = max(4.0, 0.03 * first)
    print(f"soak: rank {rank}: {first:.1f} MiB after warm-up, at most {top:.1f} MiB later (growth {top - first:+.1f}, allowed {allowed:.1f})")
    if top - first > allowed:
        bad.append(rank)
if bad:
    print(f"soak: FAIL, resident memory grew after warm-up on ranks {bad}")
    sys.exit(1)
print(f"soak: PASS ({len(rows)} samples, {len(after)} after warm-up; no growth, no hang, replicas identical)")
EOF
