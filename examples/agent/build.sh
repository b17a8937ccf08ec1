#!/usr/bin/env bash
# Build examples/agent against the libtorch of an fdlenv environment.
#
#   fdlenv run --libtorch cpu -- examples/agent/build.sh [OUT]
#
# LIBTORCH_PATH is set by fdlenv (run, shell-hook, the walk-through); the
# compiler is $CXX when the env provides one, else the host's g++. The rpath
# points at the env's libtorch, so the binary runs without LD_LIBRARY_PATH.
set -euo pipefail
: "${LIBTORCH_PATH:?run inside an fdlenv environment (fdlenv run -- $0)}"
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-agent}"
# GPU builds register their kernels from libtorch_cuda / libtorch_hip: link them when present.
gpu=()
for lib in torch_cuda c10_cuda torch_hip c10_hip; do
  [ -e "$LIBTORCH_PATH/lib/lib$lib.so" ] && gpu+=("-l$lib")
done
"${CXX:-g++}" -std=c++20 -O1 "$here/main.cpp" -o "$out" \
  -I"$LIBTORCH_PATH/include" -I"$LIBTORCH_PATH/include/torch/csrc/api/include" \
  -L"$LIBTORCH_PATH/lib" -Wl,-rpath,"$LIBTORCH_PATH/lib" \
  -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 "${gpu[@]}" -Wl,--as-needed
