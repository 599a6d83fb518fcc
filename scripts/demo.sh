#!/usr/bin/env bash
# Build (Release, build/) and run the demo: examples/dqn_cartpole on actors in one process (--ranks 4: a
# learner, two collector workers with MultiStep, a replay actor and the target network's averager actor)
# until CartPole-v1 is solved (mean return >= 475 over 100 episodes); without the actor layer,
# train_digits.
#   bash scripts/demo.sh [args for the example]   (default for dqn_cartpole: --ranks 4)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh   # libtorch is only for the benchmarks (scripts/bench.sh)

build=build
gen=()
[[ -f "$build/CMakeCache.txt" ]] || gen=(-G Ninja)
cmake "${gen[@]}" -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTROUPE_SANITIZE=OFF -DTROUPE_BUILD_EXAMPLES=ON -DTROUPE_BUILD_BENCH=OFF

demo=""
for candidate in dqn_cartpole train_digits module_tour tensor_tour; do
  if [[ -f "examples/$candidate.cpp" ]]; then demo=$candidate; break; fi
done
if [[ -z $demo ]]; then
  echo "demo.sh: none of examples/{dqn_cartpole,train_digits,module_tour,tensor_tour}.cpp exists" >&2
  exit 1
fi

targets=$(cmake --build "$build" --target help)
if [[ $demo == dqn_cartpole && $targets != *dqn_cartpole* ]]; then
  demo=train_digits  # dqn_cartpole needs the actor layer (CAF)
fi
cmake --build "$build" -j "$(nproc)" --target "$demo"
args=("$@")
if [[ $demo == dqn_cartpole && ${#args[@]} -eq 0 ]]; then args=(--ranks 4); fi
exec "$build/examples/$demo" "${args[@]+"${args[@]}"}"
