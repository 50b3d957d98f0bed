#!/usr/bin/env bash
# Builds kernels/build/libarbiter_kernels.so, the GPU testbed that `refserve --backend cuda`
# loads. Needs nvcc (CUDA 12.8 or newer, for sm_120); no GPU is needed to build.
#   NVCC        the compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   ARCHS       extra -gencode flags replacing the default sm_90 + sm_120 + compute_120 PTX
#   VERBOSE=1   print ptxas resource usage (registers, spills, shared memory)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/build"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [[ ! -x "$nvcc" ]]; then
  echo "kernels/build.sh: nvcc not found (set NVCC or install the CUDA toolkit)" >&2
  exit 1
fi
archs=(${ARCHS:--gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_120,code=sm_120 -gencode=arch=compute_120,code=compute_120})
extra=()
if [[ "${VERBOSE:-0}" == 1 ]]; then extra+=(-Xptxas -v); fi
mkdir -p "$out"
"$nvcc" -O3 -std=c++17 -lineinfo --threads 0 "${archs[@]}" "${extra[@]}" \
  -shared -Xcompiler -fPIC -Xcompiler -fvisibility=hidden \
  -Xlinker --exclude-libs,ALL \
  -o "$out/libarbiter_kernels.so" "$here/arbiter_kernels.cu"
echo "kernels/build.sh: built $out/libarbiter_kernels.so" >&2
