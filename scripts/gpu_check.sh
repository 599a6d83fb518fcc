#!/usr/bin/env bash
# The CUDA and NCCL checks, for a machine with a GPU that has the CUDA/NCCL runtime but not this build's
# other libraries (a lent device machine runs a copy of the working tree and nothing is installed there).
#   bash scripts/gpu_check.sh pack   # here: build the test binaries (build/, CUDA found) and cuda_bench
#                                    # (build-bench/), strip them, and pack them with the shared libraries
#                                    # they load that are not CUDA's, NCCL's or the C/C++ runtime's into
#                                    # .gpu/bundle.tar.xz (.gpu/ is ignored by git: carry it)
#   bash scripts/gpu_check.sh run    # there, from the repository root: unpack, run the CUDA and NCCL cases
#                                    # of the suites and cuda_bench (--torch when python3 has CUDA torch);
#                                    # logs to $OUT (or .gpu/out)
# On a machine without a GPU `run` still runs: every CUDA case skips, which checks the bundle itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The suites and their CUDA / NCCL cases (gtest filters).
suites=(
  "tensor/tensor_tests *Cuda*:*cuda*:*Gpu*:*Device*"
  "nn_tests *Cuda*:*cuda*"
  "optim_tests *Cuda*:*cuda*"
  "comm_tests *Nccl*:*nccl*:StagedGroup.*"
  "actors_tests *Cuda*"
)

pack() {
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  [[ -f build/CMakeCache.txt ]] || { echo "gpu_check: configure build/ first (bash scripts/test.sh)" >&2; exit 2; }
  grep -q '^TROUPE_WITH_CUDA:INTERNAL=ON\|TROUPE_WITH_CUDA=1' build/CMakeCache.txt build/build.ninja 2>/dev/null ||
    { echo "gpu_check: build/ was configured without CUDA (/usr/local/cuda not found?)" >&2; exit 2; }
  local targets=()
  for s in "${suites[@]}"; do targets+=("$(basename "${s%% *}")"); done
  ninja -C build "${targets[@]}"
  local gen=()
  [[ -f build-bench/CMakeCache.txt ]] || gen=(-G Ninja)
  cmake "${gen[@]}" -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DTROUPE_BUILD_BENCH=ON -DTROUPE_BUILD_TESTS=OFF \
    -DTROUPE_BUILD_EXAMPLES=OFF >/dev/null
  ninja -C build-bench cuda_bench
  rm -rf .gpu/stage && mkdir -p .gpu/stage/bin .gpu/stage/lib
  local bins=()
  for s in "${suites[@]}"; do bins+=("build/tests/${s%% *}"); done
  bins+=(build-bench/bench/cuda_bench)
  for b in "${bins[@]}"; do
    [[ -x "$b" ]] || { echo "gpu_check: $b was not built" >&2; exit 1; }
    strip -o ".gpu/stage/bin/$(basename "$b")" "$b"
    # every library it loads but the C/C++ runtime's, the driver's and CUDA's own (the GPU machine has those)
    ldd "$b" | awk '$3 ~ /^\// {print $3}' |
      grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcuda\.so|/libnvidia|/libcublas|/libnccl' |
      while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
  done
  cp bench/cuda_torch.py .gpu/stage/
  tar -C .gpu/stage -cJf .gpu/bundle.tar.xz .
  rm -rf .gpu/stage
  echo "gpu_check: .gpu/bundle.tar.xz, $(du -h .gpu/bundle.tar.xz | cut -f1) (carry .gpu)"
}

run() {
  [[ -f .gpu/bundle.tar.xz ]] || { echo "gpu_check: no .gpu/bundle.tar.xz (bash scripts/gpu_check.sh pack)" >&2; exit 2; }
  local out=${OUT:-.gpu/out} dir=.gpu/run
  mkdir -p "$out"
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf .gpu/bundle.tar.xz
  # CUDA's and NCCL's libraries where a CUDA machine keeps them
  local cuda_dirs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda-*/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && cuda_dirs="$cuda_dirs:$d"
  done
  # NCCL and cuBLAS where the toolkit has none: the wheels PyTorch brings (nvidia/*/lib in site-packages)
  local site
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
  if [[ -n $site && -d $site/nvidia ]]; then
    while read -r d; do cuda_dirs="$cuda_dirs:$d"; done < <(
      find "$site/nvidia" -maxdepth 3 \( -name 'libnccl.so*' -o -name 'libcublas*.so*' -o -name 'libcudart.so*' \) \
        -printf '%h\n' 2>/dev/null | sort -u)
  fi
  export LD_LIBRARY_PATH="$PWD/$dir/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  { nvidia-smi 2>&1 || echo "(no nvidia-smi)"; } >"$out/nvidia-smi.txt"
  head -12 "$out/nvidia-smi.txt"   # (not `| head`: under pipefail, tee's SIGPIPE would end the script here)
  local rc=0
  for s in "${suites[@]}"; do
    local bin filter name
    bin=$(basename "${s%% *}") filter=${s#* } name=$(basename "${s%% *}")
    echo "== $name --gtest_filter=$filter"
    if ! GTEST_COLOR=no "$dir/bin/$bin" --gtest_filter="$filter" >"$out/$name.log" 2>&1; then rc=1; fi
    grep -E '^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?[ ,.]|^\[  FAILED  \] [A-Za-z]' "$out/$name.log" || tail -5 "$out/$name.log"
  done
  echo "== cuda_bench"
  local torch=()
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    torch=(--torch "--torch-script=$dir/cuda_torch.py")
  fi
  "$dir/bin/cuda_bench" "${torch[@]+"${torch[@]}"}" 2>&1 | tee "$out/cuda_bench.txt" || rc=1
  return $rc
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
