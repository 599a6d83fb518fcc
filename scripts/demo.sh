#!/usr/bin/env bash
# Build (Release, build/) and run the demo: examples/train_digits if present, else tensor_tour.
#   bash scripts/demo.sh [args for the example]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh   # libtorch is only for the benchmarks (scripts/bench.sh)

build=build
gen=()
[[ -f "$build/CMakeCache.txt" ]] || gen=(-G Ninja)
cmake "${gen[@]}" -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_SANITIZE=OFF -DTROUPE_BUILD_EXAMPLES=ON -DTROUPE_BUILD_BENCH=OFF

demo=""
for candidate in train_digits module_tour tensor_tour; do
  if [[ -f "examples/$candidate.cpp" ]]; then demo=$candidate; break; fi
done
if [[ -z $demo ]]; then
  echo "demo.sh: none of examples/{train_digits,module_tour,tensor_tour}.cpp exists" >&2
  exit 1
fi

cmake --build "$build" -j "$(nproc)" --target "$demo"
exec "$build/examples/$demo" "$@"
