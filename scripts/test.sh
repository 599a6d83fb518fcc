#!/usr/bin/env bash
# Configure, build and run the tests.
#   bash scripts/test.sh [--sanitize|--tsan] [-- <ctest args>]
#   default:     build/ (Release), everything but the benchmarks, all ctest tests
#   --sanitize:  build-sanitize/ (-O1 -g1, ASan+UBSan, CPU only): the suites named by
#                TROUPE_SANITIZE_SUITES (default "tensor nn optim data util comm actors fuzz": fuzz is
#                fuzz_replay, the fuzz corpora and their kept findings),
#                ctest -L <suite> for each, their mpirun entries included (leak suppressions for
#                Open MPI and OpenBLAS in tests/lsan.supp)
#   --tsan:      build-tsan/ (ThreadSanitizer on every layer; comm, parallel, actors, launch at -O1,
#                the layers below at -O0; CPU only): the suites named by TROUPE_TSAN_SUITES (default "comm actors"),
#                their single-process tests only (ctest -L <suite> -E mpi:
#                TSan cannot follow Open MPI's shared-memory transport); suppressions in tests/tsan.supp
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sanitize=0
tsan=0
ctest_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitize) sanitize=1; shift ;;
    --tsan) tsan=1; shift ;;
    --) shift; ctest_extra=("$@"); break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (ctest arguments go after --)" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh --with-browser  # chromium: the dashboard's browser test

jobs=$(nproc)

# The programs a suite's ctest entries start besides <suite>_tests (its mpirun and launch entries).
declare -A extra_targets=(
  [comm]="launch_demo"
  [actors]="actors_mpi_tests actors_mpi_supervision actors_dead_peer actors_startup_refused soak_train"
  [fuzz]="fuzz_replay"
)

# ccache (installed by setup.sh) makes a rebuild of an unchanged file a cache hit, also from another
# clone of the repository: paths are hashed relative to the source root.
launcher_args=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# -G Ninja only on the first configure (re-passing it is harmless, but an existing build dir
# made with another generator should get cmake's own error, not a confusing one).
generator_args() {
  if [[ ! -f "$1/CMakeCache.txt" ]]; then echo "-G Ninja"; fi
}

if [[ $sanitize == 1 && $tsan == 1 ]]; then
  echo "test.sh: --sanitize and --tsan are separate builds; give one" >&2
  exit 2
fi

# configure_instrumented DIR OPTION FLAGS: a Debug tree with one of the instrumented builds (OPTION=ON),
# FLAGS as its optimisation, CPU only, tests without benches or examples
configure_instrumented() {
  # shellcheck disable=SC2046
  cmake $(generator_args "$1") -S . -B "$1" \
    -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=$3" \
    "-D$2=ON" "${launcher_args[@]}" \
    -DTROUPE_CUDA=OFF \
    -DTROUPE_BUILD_TESTS=ON \
    -DTROUPE_BUILD_BENCH=OFF \
    -DTROUPE_BUILD_EXAMPLES=OFF
}

if [[ $tsan == 1 ]]; then
  build="build-tsan"
  configure_instrumented "$build" TROUPE_TSAN "-O0"
  suites=(${TROUPE_TSAN_SUITES:-comm actors})
  targets=()
  for suite in "${suites[@]}"; do targets+=("${suite}_tests"); done
  [[ " ${suites[*]} " == *" comm "* ]] && targets+=(launch_demo)  # launch_demo_ranks3 (label comm)
  [[ " ${suites[*]} " == *" actors "* ]] && targets+=(soak_train)  # soak_short (label actors)
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  # halt_on_error: the first race fails the test that hit it (its report is in the output). history_size=7
  # (TSan's most): with 4 a CAF hand-over whose suppression names the sender's frame was reported with
  # "failed to restore the stack" in its place, so the suppression did not match.
  export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 history_size=7"
  label_regex=$(IFS='|'; echo "^(${suites[*]})\$")
  ctest --test-dir "$build" --output-on-failure -j "$jobs" -L "$label_regex" -E "mpi" "${ctest_extra[@]}"
elif [[ $sanitize == 1 ]]; then
  build="build-sanitize"
  configure_instrumented "$build" TROUPE_SANITIZE "-O1 -g1"
  suites=(${TROUPE_SANITIZE_SUITES:-tensor nn optim data util comm actors fuzz})
  targets=()
  # the target list is read once into a variable: `cmake ... | grep -q` under pipefail fails whenever
  # grep stops reading early (SIGPIPE), which silently dropped suites from the run
  target_list=$(cmake --build "$build" --target help 2>/dev/null || true)
  for suite in "${suites[@]}"; do
    # each suite's test binary and the programs its mpirun entries start
    for t in "${suite}_tests" ${extra_targets[$suite]:-}; do
      if grep -q "^${t}:" <<<"$target_list"; then
        targets+=("$t")
      fi
    done
  done
  if [[ ${#targets[@]} -gt 0 ]]; then
    cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  else
    echo "test.sh: no ${suites[*]} test targets yet; building everything"
    cmake --build "$build" -j "$jobs"
  fi
  export ASAN_OPTIONS=detect_leaks=1
  # leaks inside Open MPI and OpenBLAS (tests/lsan.supp says which and why); Open MPI's components stay
  # loaded so that their frames name their library
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp print_suppressions=0"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  export UBSAN_OPTIONS=print_stacktrace=1
  label_regex=$(IFS='|'; echo "^(${suites[*]})\$")
  # the single-process tests, then the mpirun entries with the slow unwinder on malloc: Open MPI is built
  # without frame pointers, so the fast one stops one frame into it and its leaks could not be told
  # from troupe's (nor matched by tests/lsan.supp)
  status=0
  ctest --test-dir "$build" --output-on-failure -j "$jobs" -L "$label_regex" -E "mpi" "${ctest_extra[@]}" || status=$?
  # --repeat until-pass:3 on the mpirun entries only: under ASan at load 6-11 they failed 4 passes in 5 on
  # CAF's side (an LSan report of ~5 KB in CAF's BASP broker teardown, 2 runs in 22; a start-up connect
  # past CAF's timeout; docs/architecture.md, "Sanitizers"); actors_mpi_supervision_np3 showed the BASP
  # report in 1 run of 6 beside a build, twice in a row in one CI rehearsal (2026-11-28), hence three
  # tries; a test failing three times still fails the pass
  ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
    ctest --test-dir "$build" --output-on-failure -L "$label_regex" -R "mpi" --no-tests=ignore \
    --repeat until-pass:3 "${ctest_extra[@]}" || status=$?
  exit $status
else
  build="build"
  # shellcheck disable=SC2046
  cmake $(generator_args "$build") -S . -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DTROUPE_SANITIZE=OFF "${launcher_args[@]}" \
    -DTROUPE_BUILD_TESTS=ON \
    -DTROUPE_BUILD_BENCH=OFF
  cmake --build "$build" -j "$jobs"
  ctest --test-dir "$build" --output-on-failure -j "$jobs" "${ctest_extra[@]}"
fi
