#!/usr/bin/env bash
# One GPU session: build the library, run the Go tests built elsewhere (no Go on the GPU
# machine), the torch.topk comparison, the race harness and, when bin/arbiter is carried,
# the GPU example specs through arbiter itself. Expects, under $CARRY (default .carry/):
# kernels.test, refserve.test and racebench built with CGO_ENABLED=0, and optionally
# bin/arbiter (cgo, for SQLite) with bin/refserve beside it.
# Writes everything to $OUT/all.tar.gz (default OUT: ./gpu-out), plus the library.
set -uo pipefail
carry="${CARRY:-.carry}"
final="${OUT:-gpu-out}"
out="$(mktemp -d)"
mkdir -p "$final"
trap 'tar -C "$out" -czf "$final/all.tar.gz" . ; cp "$out/race.md" "$final/" 2>/dev/null' EXIT
{ date -u; nvidia-smi; nvcc --version; python3 -c 'import torch; print("torch", torch.__version__)'; } >"$out/env.txt" 2>&1
if [[ -f "$carry/libarbiter_kernels.so" && "${REBUILD:-0}" != 1 ]]; then
  mkdir -p kernels/build && cp "$carry/libarbiter_kernels.so" kernels/build/
  echo "using the carried library" >"$out/build.log"
else
  VERBOSE=1 timeout 400 bash kernels/build.sh >"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
  cp kernels/build/libarbiter_kernels.so "$final/"
fi
grep -E "Compiling entry|registers|spill" "$out/build.log" | grep -B1 -E "spill stores [1-9]|bytes stack frame, [1-9]" | head -20
export ARBITER_KERNELS_LIB="$PWD/kernels/build/libarbiter_kernels.so"
{
  echo "== no visible device"
  CUDA_VISIBLE_DEVICES= ARBITER_EXPECT_NO_DEVICE=1 timeout 60 "$carry/kernels.test" -test.run NoDevice -test.v
  echo "== kernels tests"
  ARBITER_REQUIRE_GPU=1 timeout 180 "$carry/kernels.test" -test.v -test.timeout 170s
  echo "== refserve cuda backend tests"
  timeout 120 "$carry/refserve.test" -test.run CUDA -test.v -test.timeout 110s
} >"$out/tests.log" 2>&1
grep -E "^(=+|--- |ok|FAIL|PASS)|gpu_test|backend_cuda" "$out/tests.log"
PYTHONUNBUFFERED=1 timeout 240 python3 kernels/bench/topk_vs_torch.py "$ARBITER_KERNELS_LIB" "$out/topk.json" >"$out/topk.log" 2>&1
tail -12 "$out/topk.log"
timeout 300 "$carry/racebench" ${RACEBENCH_ARGS:-} -json "$out/race.json" >"$out/race.md" 2>&1
cat "$out/race.md"
if [[ -x "$carry/bin/arbiter" ]]; then
  root="$PWD"
  work="$out/arbiter"
  mkdir -p "$work"
  for spec in ${SPECS:-gpu-decisive gpu-factorial}; do
    (cd "$work" && timeout 300 "$root/$carry/bin/arbiter" run --db "$work/arbiter.db" "$root/examples/$spec.yaml" \
      >"$work/$spec.out" 2>"$work/$spec.err"; echo "arbiter run $spec: exit $?" >>"$work/$spec.out")
    cat "$work/$spec.out"
  done
  rm -f "$work"/arbiter.db-*
fi
