#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: one per decoder of outside bytes) with clang-14 in
# build-fuzz/ (TROUPE_FUZZ=ON: ASan+UBSan+coverage) and runs each for SECONDS (default 60) from the
# committed seed corpus tests/fuzz/corpus/<entry>/ (read only: new inputs go to build-fuzz/corpus/<entry>/).
# A crash leaves its input as build-fuzz/findings/<entry>/crash-*; the script then exits 1.
#   bash scripts/fuzz.sh [SECONDS] [ENTRY...]
# TROUPE_FUZZ_TIMEOUT: seconds one input may take (default 10; raise it on a loaded machine, where a
# starved process trips it); TROUPE_FUZZ_JOBS: build jobs (default nproc); TROUPE_FUZZ_BUILD=0: run the targets already built (while
# another process builds the rest). Needs clang-14 and libclang-rt-14-dev (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=60
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
if [[ $# -gt 0 && ($1 == -h || $1 == --help) ]]; then sed -n '2,11p' "$0"; exit 0; fi
all=(checkpoint safetensors digits mnist wire metrics_jsonl tfevents auth_listener auth_peer lane_ring jit_archive)
entries=("$@")
[[ ${#entries[@]} -gt 0 ]] || entries=("${all[@]}")
for e in "${entries[@]}"; do
  [[ " ${all[*]} " == *" $e "* ]] || { echo "fuzz.sh: unknown entry '$e' (entries: ${all[*]})" >&2; exit 2; }
done

build=build-fuzz
if [[ ${TROUPE_FUZZ_BUILD:-1} != 0 ]]; then
bash scripts/setup.sh --with-fuzz  # clang-14 and libclang-rt-14-dev (and the rest)
cc=$(command -v clang-14 || true)
cxx=$(command -v clang++-14 || true)
if [[ -z $cc || -z $cxx ]]; then
  echo "fuzz.sh: clang-14 not found (bash scripts/setup.sh --with-fuzz installs it)" >&2
  exit 2
fi

launcher_args=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
[[ -f $build/CMakeCache.txt ]] || generator=(-G Ninja)
cmake "${generator[@]}" -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher_args[@]}" \
  -DTROUPE_FUZZ=ON -DTROUPE_CUDA=OFF -DTROUPE_BUILD_TESTS=ON -DTROUPE_BUILD_BENCH=OFF -DTROUPE_BUILD_EXAMPLES=OFF
targets=()
for e in "${entries[@]}"; do targets+=("fuzz_$e"); done
cmake --build "$build" -j "${TROUPE_FUZZ_JOBS:-$(nproc)}" --target "${targets[@]}"
else
  for e in "${entries[@]}"; do
    [[ -x $build/tests/fuzz/fuzz_$e ]] || { echo "fuzz.sh: $build/tests/fuzz/fuzz_$e is not built (TROUPE_FUZZ_BUILD=0)" >&2; exit 2; }
  done
fi

# ASan: a decoder may not allocate by what the bytes claim (-malloc_limit_mb); leaks are findings too.
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for e in "${entries[@]}"; do
  work="$build/corpus/$e"
  findings="$build/findings/$e"
  mkdir -p "$work" "$findings"
  echo "== fuzz_$e for ${seconds}s (seeds: tests/fuzz/corpus/$e, new inputs: $work)"
  if ! "$build/tests/fuzz/fuzz_$e" -max_total_time="$seconds" -max_len=65536 -malloc_limit_mb=512 \
        -rss_limit_mb=2048 -timeout="${TROUPE_FUZZ_TIMEOUT:-10}" -print_final_stats=1 -artifact_prefix="$findings/" \
        "$work" "tests/fuzz/corpus/$e" >"$build/fuzz_$e.log" 2>&1; then
    echo "== fuzz_$e FOUND A CRASH: $(ls "$findings" | head -3 | tr '\n' ' ')(log: $build/fuzz_$e.log)"
    tail -n 40 "$build/fuzz_$e.log"
    status=1
  else
    echo "== fuzz_$e: $(grep -E '^stat::number_of_executed_units' "$build/fuzz_$e.log" | awk '{print $2}') runs," \
         "$(grep -E '^stat::new_units_added' "$build/fuzz_$e.log" | awk '{print $2}') new inputs, no crash"
  fi
done
exit $status
