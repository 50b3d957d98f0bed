// arbiter_kernels.cu: the GPU testbed behind arbiter_kernels.h.
//
// One decode pass over a batch of running requests goes like this:
//   host:    plan the pool (LRU); pages that left it are queued for a restore (HiCache) or
//            a recompute, each page tagged with the identity of the bytes it must hold;
//   load:    per layer, cudaMemcpyAsync from the pinned backup into a staging area, a
//            scatter into the pool slots that writes each slot's stamp last, one event;
//   compute: per layer, some other work of the layer, [the gate: wait on the layer's
//            restore event], score every token of every request against its query, top-k;
//            then the same from canonical bytes, and a comparison of the two selections.
// Without the gate nothing orders the read after the restore: an evicted slot still holds
// its previous owner's bytes, so a read that wins the race scores the wrong tokens and,
// through the discrete top-k, changes which tokens attention will see.

#include "arbiter_kernels.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kPage = ARB_TOKENS_PER_PAGE;
constexpr int kDim = ARB_INDEX_DIM;
constexpr int kTopK = ARB_TOPK;
constexpr int kMaxContext = 32768;
constexpr int kTopkThreads = 1024;
constexpr int kScoreThreads = 256;
constexpr uint32_t kScaleWord = 4000;  // content word index of a token's fp8 scale
constexpr uint32_t kWeightWord = 4000; // query word index of a head's weight
constexpr uint64_t kQuerySalt = 0x51E5A17C0FFEE123ull;

thread_local std::string g_err;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define CK(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess)                                                                  \
      throw Failure(std::string(#call) + ": " + cudaGetErrorName(e_) + ": " +               \
                    cudaGetErrorString(e_) + " (" __FILE__ ":" + std::to_string(__LINE__) + \
                    ")");                                                                   \
  } while (0)

#define CK_LAUNCH(what) CK(cudaPeekAtLastError())

// ---- deterministic content ---------------------------------------------------------------

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// session_key folds the seed and a session id into the key its content derives from.
__host__ __device__ __forceinline__ uint64_t session_key(uint64_t seed, uint64_t session) {
  return mix64(session ^ mix64(seed + 0x9E3779B97F4A7C15ull));
}

__host__ __device__ __forceinline__ uint64_t content_word(uint64_t key, uint32_t token,
                                                          uint32_t layer, uint32_t word) {
  return mix64(key + ((uint64_t)layer << 56) + ((uint64_t)token << 12) + word);
}

// fp8_word keeps e4m3 codes finite and varied: bit 6 cleared caps the exponent field at 7,
// so no code is NaN and values span about 2^-9 .. 1.875.
__host__ __device__ __forceinline__ uint64_t fp8_word(uint64_t h) {
  return h & 0xBFBFBFBFBFBFBFBFull;
}

// bf16_word turns 4 random halves into bf16 values with exponents 2^-3 .. 2^4.
__host__ __device__ __forceinline__ uint64_t bf16_word(uint64_t h) {
  uint64_t out = 0;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = (uint32_t)(h >> (16 * i)) & 0xFFFFu;
    uint32_t b = (v & 0x807Fu) | ((124u + ((v >> 7) & 7u)) << 7);
    out |= (uint64_t)b << (16 * i);
  }
  return out;
}

__host__ __device__ __forceinline__ float unit_from_top24(uint64_t h) {
  return (float)(uint32_t)(h >> 40) * (1.0f / 16777216.0f);
}

__host__ __device__ __forceinline__ float scale_of(uint64_t h) { return 0.5f + unit_from_top24(h); }

__host__ __device__ __forceinline__ int token_bytes(int dtype) {
  return dtype == ARB_DTYPE_FP8 ? kDim + 4 : kDim * 2;
}

__host__ __device__ __forceinline__ int words_per_token(int dtype) {
  return dtype == ARB_DTYPE_FP8 ? kDim / 8 : kDim / 4;
}

// page_tag names the bytes a page must hold; a slot's stamp equals it once they landed.
__host__ __device__ __forceinline__ uint64_t page_tag(uint64_t key, int page) {
  return mix64(key ^ (0xA5A5000000000000ull + (uint64_t)page)) | 1ull;
}

// fill_page_host writes one page of one layer exactly as recompute_kernel does.
void fill_page_host(uint8_t* dst, uint64_t key, int page, int layer, int dtype) {
  const int wpt = words_per_token(dtype);
  uint64_t* words = reinterpret_cast<uint64_t*>(dst);
  for (int t = 0; t < kPage; ++t) {
    const uint32_t tok = (uint32_t)(page * kPage + t);
    for (int w = 0; w < wpt; ++w) {
      const uint64_t h = content_word(key, tok, (uint32_t)layer, (uint32_t)w);
      words[t * wpt + w] = dtype == ARB_DTYPE_FP8 ? fp8_word(h) : bf16_word(h);
    }
    if (dtype == ARB_DTYPE_FP8) {
      float s = scale_of(content_word(key, tok, (uint32_t)layer, kScaleWord));
      std::memcpy(dst + kPage * kDim + t * 4, &s, 4);
    }
  }
}

// ---- kernels -----------------------------------------------------------------------------

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// layer_work_kernel stands for the rest of a layer (attention, MLP) that runs on the
// compute stream ahead of the indexer read; its length varies the way real layers do.
__global__ void layer_work_kernel(uint64_t ns) {
  const uint64_t t0 = globaltimer_ns();
  while (globaltimer_ns() - t0 < ns) {
  }
}

__global__ void recompute_kernel(uint8_t* pool, unsigned long long* stamps, int pool_pages,
                                 int page_bytes, int dtype, const int32_t* slots,
                                 const int32_t* pages, const unsigned long long* sessions,
                                 unsigned long long seed) {
  const int i = blockIdx.x;
  const int layer = blockIdx.y;
  const int slot = slots[i];
  const int page = pages[i];
  uint8_t* dst = pool + ((size_t)layer * pool_pages + slot) * page_bytes;
  const uint64_t key = session_key(seed, sessions[i]);
  const int wpt = words_per_token(dtype);
  uint64_t* words = reinterpret_cast<uint64_t*>(dst);
  for (int w = threadIdx.x; w < kPage * wpt; w += blockDim.x) {
    const int t = w / wpt;
    const uint32_t tok = (uint32_t)(page * kPage + t);
    const uint64_t h = content_word(key, tok, (uint32_t)layer, (uint32_t)(w % wpt));
    words[w] = dtype == ARB_DTYPE_FP8 ? fp8_word(h) : bf16_word(h);
  }
  if (dtype == ARB_DTYPE_FP8) {
    float* scales = reinterpret_cast<float*>(dst + kPage * kDim);
    for (int t = threadIdx.x; t < kPage; t += blockDim.x)
      scales[t] = scale_of(content_word(key, (uint32_t)(page * kPage + t), (uint32_t)layer, kScaleWord));
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    *reinterpret_cast<volatile unsigned long long*>(&stamps[(size_t)layer * pool_pages + slot]) =
        page_tag(key, page);
}

// restore_scatter_kernel moves restored pages from staging into their pool slots on the
// load stream and writes each slot's stamp after its bytes, so a reader that sees the new
// stamp sees the new bytes.
__global__ void restore_scatter_kernel(const uint8_t* staging, uint8_t* pool_layer,
                                       unsigned long long* stamps_layer, const int32_t* slots,
                                       const unsigned long long* tags, int page_bytes) {
  const int i = blockIdx.x;
  const int slot = slots[i];
  const uint4* src = reinterpret_cast<const uint4*>(staging + (size_t)i * page_bytes);
  uint4* dst = reinterpret_cast<uint4*>(pool_layer + (size_t)slot * page_bytes);
  for (int v = threadIdx.x; v < page_bytes / 16; v += blockDim.x) dst[v] = src[v];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    *reinterpret_cast<volatile unsigned long long*>(&stamps_layer[slot]) = tags[i];
}

struct ScoreArgs {
  const uint8_t* pool;                // [layers][pool_pages][page_bytes]
  const unsigned long long* stamps;   // [layers][pool_pages]
  const int32_t* page_table;          // [rows][max_pages]
  const unsigned long long* tags;     // [rows][max_pages]
  const unsigned long long* sessions; // [rows]
  const uint32_t* steps;              // [rows]
  const int32_t* lens;                // [rows]
  float* scores;                      // [rows][ld]
  int32_t* stale;                     // [rows]
  unsigned long long seed;
  int pool_pages, page_bytes, max_pages, ld, heads, layer;
};

// score_kernel: one block per (page, request); 8 lanes per token, each lane 16 of the 128
// values. CANONICAL computes the bytes from the generator instead of reading the pool, with
// the same arithmetic in the same order, so equal bytes give bit-equal scores.
template <int DTYPE, bool CANONICAL>
__global__ void __launch_bounds__(kScoreThreads) score_kernel(ScoreArgs a) {
  extern __shared__ float4 qs[];  // [heads][8 lane slices][4 float4 + 1 pad]
  __shared__ float ws[64];
  __shared__ int slot_s;
  const int row = blockIdx.y;
  const int page = blockIdx.x;
  const int len = a.lens[row];
  const int tok0 = page * kPage;
  if (tok0 >= len) return;

  const uint64_t session = a.sessions[row];
  const uint64_t qkey = session_key(a.seed ^ kQuerySalt, session);
  const uint32_t step = a.steps[row];
  float* qf = reinterpret_cast<float*>(qs);
  for (int i = threadIdx.x; i < a.heads * (kDim / 2); i += blockDim.x) {
    const int h = i / (kDim / 2);
    const int d = (i % (kDim / 2)) * 2;
    const uint64_t w = content_word(qkey, step, (uint32_t)a.layer, (uint32_t)i);
    const float v0 = (float)(int32_t)(uint32_t)w * (1.0f / 2147483648.0f);
    const float v1 = (float)(int32_t)(uint32_t)(w >> 32) * (1.0f / 2147483648.0f);
    qf[(h * 8 + (d >> 4)) * 20 + (d & 15)] = v0;
    qf[(h * 8 + ((d + 1) >> 4)) * 20 + ((d + 1) & 15)] = v1;
  }
  for (int h = threadIdx.x; h < a.heads; h += blockDim.x)
    ws[h] = 0.25f + unit_from_top24(content_word(qkey, step, (uint32_t)a.layer, kWeightWord + h));
  if (!CANONICAL && threadIdx.x == 0) {
    const int slot = a.page_table[(size_t)row * a.max_pages + page];
    const unsigned long long stamp = *reinterpret_cast<const volatile unsigned long long*>(
        &a.stamps[(size_t)a.layer * a.pool_pages + slot]);
    if (stamp != a.tags[(size_t)row * a.max_pages + page]) atomicAdd(&a.stale[row], 1);
    slot_s = slot;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 3;
  const int j = lane & 7;
  const uint8_t* base = nullptr;
  if (!CANONICAL) base = a.pool + ((size_t)a.layer * a.pool_pages + slot_s) * a.page_bytes;
  const uint64_t ckey = session_key(a.seed, session);

#pragma unroll
  for (int it = 0; it < 2; ++it) {
    const int tp = warp * 8 + it * 4 + g;
    const int tok = tok0 + tp;
    float vals[16];
    float scale = 1.0f;
    if (DTYPE == ARB_DTYPE_FP8) {
      uint4 raw;
      if (CANONICAL) {
        const uint64_t w0 = fp8_word(content_word(ckey, (uint32_t)tok, (uint32_t)a.layer, 2 * j));
        const uint64_t w1 = fp8_word(content_word(ckey, (uint32_t)tok, (uint32_t)a.layer, 2 * j + 1));
        raw = make_uint4((uint32_t)w0, (uint32_t)(w0 >> 32), (uint32_t)w1, (uint32_t)(w1 >> 32));
        scale = scale_of(content_word(ckey, (uint32_t)tok, (uint32_t)a.layer, kScaleWord));
      } else {
        raw = __ldcg(reinterpret_cast<const uint4*>(base + tp * kDim + j * 16));
        scale = __ldcg(reinterpret_cast<const float*>(base + kPage * kDim + tp * 4));
      }
      const uint32_t parts[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        // Hardware e4m3x2 -> f16x2 conversion; exact, as every e4m3 value is an fp16.
        const float2 lo = __half22float2(__half2(
            __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(parts[p] & 0xFFFFu), __NV_E4M3)));
        const float2 hi = __half22float2(__half2(
            __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(parts[p] >> 16), __NV_E4M3)));
        vals[p * 4] = lo.x;
        vals[p * 4 + 1] = lo.y;
        vals[p * 4 + 2] = hi.x;
        vals[p * 4 + 3] = hi.y;
      }
    } else {
      uint4 r0, r1;
      if (CANONICAL) {
        uint64_t w[4];
#pragma unroll
        for (int m = 0; m < 4; ++m)
          w[m] = bf16_word(content_word(ckey, (uint32_t)tok, (uint32_t)a.layer, 4 * j + m));
        r0 = make_uint4((uint32_t)w[0], (uint32_t)(w[0] >> 32), (uint32_t)w[1], (uint32_t)(w[1] >> 32));
        r1 = make_uint4((uint32_t)w[2], (uint32_t)(w[2] >> 32), (uint32_t)w[3], (uint32_t)(w[3] >> 32));
      } else {
        r0 = __ldcg(reinterpret_cast<const uint4*>(base + tp * kDim * 2 + j * 32));
        r1 = __ldcg(reinterpret_cast<const uint4*>(base + tp * kDim * 2 + j * 32 + 16));
      }
      const uint32_t parts[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        vals[2 * p] = __uint_as_float(parts[p] << 16);
        vals[2 * p + 1] = __uint_as_float(parts[p] & 0xFFFF0000u);
      }
    }
    float score = 0.0f;
    for (int h = 0; h < a.heads; ++h) {
      const float4* q4 = qs + (h * 8 + j) * 5;
      float d = 0.0f;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const float4 q = q4[m];
        d = fmaf(q.x, vals[4 * m], d);
        d = fmaf(q.y, vals[4 * m + 1], d);
        d = fmaf(q.z, vals[4 * m + 2], d);
        d = fmaf(q.w, vals[4 * m + 3], d);
      }
      d += __shfl_xor_sync(0xffffffffu, d, 4);
      d += __shfl_xor_sync(0xffffffffu, d, 2);
      d += __shfl_xor_sync(0xffffffffu, d, 1);
      score = fmaf(ws[h], fmaxf(d * scale, 0.0f), score);
    }
    if (j == 0 && tok < len) a.scores[(size_t)row * a.ld + tok] = score;
  }
}

__device__ __forceinline__ uint32_t float_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// topk_kernel: radix select of the k largest of one row per block, the row held in
// registers (ITEMS per thread), four 8-bit passes. VARIANT picks how the histogram is
// built: 1 one shared histogram, 2 warp-aggregated with match_any, 3 one per warp.
// Elements above the threshold are written in any order; ties at the threshold are taken
// by lowest index, so a selection is a deterministic set.
template <int ITEMS, int VARIANT>
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const float* __restrict__ scores, int ld,
                                                            const int32_t* __restrict__ lens, int cols,
                                                            int k, int32_t* __restrict__ out) {
  constexpr int kBins = 256;
  constexpr int kHist = VARIANT == 3 ? 32 * kBins : kBins;
  __shared__ uint32_t hist[kHist];
  __shared__ uint32_t s_bin, s_krem, s_eq;
  __shared__ uint32_t s_warp[32];
  __shared__ int s_gt, s_eqc;
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int n = lens ? min(lens[row], cols) : cols;
  const float* src = scores + (size_t)row * ld;
  int32_t* dst = out + (size_t)row * k;
  if (n <= k) {
    for (int i = tid; i < k; i += kTopkThreads) dst[i] = i < n ? i : -1;
    return;
  }
  uint32_t key[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int idx = i * kTopkThreads + tid;
    key[i] = idx < n ? float_key(__ldg(src + idx)) : 0u;  // 0 sorts below every real score
  }
  uint32_t prefix = 0, mask = 0, krem = (uint32_t)k;
#pragma unroll
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = tid; i < kHist; i += kTopkThreads) hist[i] = 0;
    __syncthreads();
    uint32_t* h = VARIANT == 3 ? hist + warp * kBins : hist;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const bool match = (key[i] & mask) == prefix;
      const uint32_t bin = (key[i] >> shift) & 255u;
      if (VARIANT == 2) {
        const unsigned active = __ballot_sync(0xffffffffu, match);
        if (match) {
          const unsigned peers = __match_any_sync(active, bin);
          if (lane == __ffs(peers) - 1) atomicAdd(&h[bin], (uint32_t)__popc(peers));
        }
      } else if (match) {
        atomicAdd(&h[bin], 1u);
      }
    }
    __syncthreads();
    if (VARIANT == 3) {
      for (int b = tid; b < kBins; b += kTopkThreads) {
        uint32_t s = 0;
        for (int w = 0; w < 32; ++w) s += hist[w * kBins + b];
        hist[b] = s;
      }
      __syncthreads();
    }
    if (tid < 32) {
      uint32_t c[8];
      uint32_t sum = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        c[b] = hist[tid * 8 + b];
        sum += c[b];
      }
      uint32_t incl = sum;  // count in lanes >= tid
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t v = __shfl_down_sync(0xffffffffu, incl, off);
        if (tid + off < 32) incl += v;
      }
      uint32_t above = incl - sum;
#pragma unroll
      for (int b = 7; b >= 0; --b) {
        if (above < krem && above + c[b] >= krem) {
          s_bin = (uint32_t)(tid * 8 + b);
          s_krem = krem - above;
          s_eq = c[b];
        }
        above += c[b];
      }
    }
    __syncthreads();
    prefix |= s_bin << shift;
    mask |= 255u << shift;
    krem = s_krem;
  }
  const uint32_t thr = prefix;
  const int ngt = k - (int)krem;
  const bool exact = s_eq == krem;  // every element equal to thr is taken
  if (tid == 0) {
    s_gt = 0;
    s_eqc = 0;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int idx = i * kTopkThreads + tid;
    if (key[i] > thr) {
      dst[atomicAdd(&s_gt, 1)] = idx;
    } else if (exact && key[i] == thr) {
      dst[ngt + atomicAdd(&s_eqc, 1)] = idx;
    }
  }
  if (!exact) {
    uint32_t base = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const bool f = key[i] == thr;
      const unsigned bal = __ballot_sync(0xffffffffu, f);
      if (lane == 0) s_warp[warp] = (uint32_t)__popc(bal);
      __syncthreads();
      uint32_t before = 0, total = 0;
      for (int w = 0; w < 32; ++w) {
        const uint32_t c = s_warp[w];
        if (w < warp) before += c;
        total += c;
      }
      const uint32_t pos = base + before + (uint32_t)__popc(bal & ((1u << lane) - 1u));
      if (f && pos < krem) dst[ngt + pos] = i * kTopkThreads + tid;
      base += total;
      __syncthreads();
    }
  }
}

// compare_kernel counts, per request, how many of the pool-path selection are in the
// canonical selection.
__global__ void compare_kernel(const int32_t* sel, const int32_t* ref, const int32_t* lens, int k,
                               int layers, int layer, int32_t* inter) {
  __shared__ uint32_t bits[kMaxContext / 32];
  __shared__ int count;
  const int row = blockIdx.x;
  const int n = lens[row];
  const int words = (n + 31) / 32;
  for (int i = threadIdx.x; i < words; i += blockDim.x) bits[i] = 0;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const int x = ref[(size_t)row * k + i];
    if (x >= 0 && x < n) atomicOr(&bits[x >> 5], 1u << (x & 31));
  }
  __syncthreads();
  int c = 0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const int x = sel[(size_t)row * k + i];
    if (x >= 0 && x < n && ((bits[x >> 5] >> (x & 31)) & 1u)) ++c;
  }
  atomicAdd(&count, c);
  __syncthreads();
  if (threadIdx.x == 0) inter[row * layers + layer] = count;
}

// ---- host --------------------------------------------------------------------------------

template <int V>
void launch_topk_v(const float* scores, int ld, const int32_t* lens, int rows, int cols, int k,
                   int32_t* out, cudaStream_t st) {
  if (cols <= 4 * kTopkThreads)
    topk_kernel<4, V><<<rows, kTopkThreads, 0, st>>>(scores, ld, lens, cols, k, out);
  else if (cols <= 8 * kTopkThreads)
    topk_kernel<8, V><<<rows, kTopkThreads, 0, st>>>(scores, ld, lens, cols, k, out);
  else if (cols <= 16 * kTopkThreads)
    topk_kernel<16, V><<<rows, kTopkThreads, 0, st>>>(scores, ld, lens, cols, k, out);
  else
    topk_kernel<32, V><<<rows, kTopkThreads, 0, st>>>(scores, ld, lens, cols, k, out);
  CK_LAUNCH("topk_kernel");
}

constexpr int kDefaultTopkVariant = 1;  // fastest on an H200 (docs/results)

void launch_topk(const float* scores, int ld, const int32_t* lens, int rows, int cols, int k,
                 int32_t* out, cudaStream_t st, int variant) {
  if (rows <= 0) return;
  if (cols < 1 || cols > kMaxContext)
    throw Failure("topk: cols " + std::to_string(cols) + " outside 1.." + std::to_string(kMaxContext));
  if (k < 1 || k > kMaxContext) throw Failure("topk: k " + std::to_string(k) + " outside 1..32768");
  if (variant == 0) variant = kDefaultTopkVariant;
  switch (variant) {
    case 1: launch_topk_v<1>(scores, ld, lens, rows, cols, k, out, st); break;
    case 2: launch_topk_v<2>(scores, ld, lens, rows, cols, k, out, st); break;
    case 3: launch_topk_v<3>(scores, ld, lens, rows, cols, k, out, st); break;
    default: throw Failure("topk: unknown variant " + std::to_string(variant));
  }
}

template <typename T>
struct Mirror {  // a pinned host buffer and its device twin
  T* h = nullptr;
  T* d = nullptr;
  size_t n = 0;
  void alloc(size_t count) {
    n = count;
    CK(cudaHostAlloc(reinterpret_cast<void**>(&h), std::max<size_t>(count, 1) * sizeof(T), cudaHostAllocDefault));
    CK(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(count, 1) * sizeof(T)));
  }
  void release() {
    if (h) cudaFreeHost(h);
    if (d) cudaFree(d);
    h = nullptr;
    d = nullptr;
  }
  void up(size_t count, cudaStream_t st) {
    if (count) CK(cudaMemcpyAsync(d, h, count * sizeof(T), cudaMemcpyHostToDevice, st));
  }
  void down(size_t count, cudaStream_t st) {
    if (count) CK(cudaMemcpyAsync(h, d, count * sizeof(T), cudaMemcpyDeviceToHost, st));
  }
};

struct Session {
  uint64_t id = 0;
  uint64_t key = 0;
  uint64_t last_tick = 0;
  uint32_t step = 0;
  bool live = false;
  std::vector<int32_t> resident;  // page -> slot, -1 when not in the pool
  std::vector<uint8_t> backed;    // page -> its bytes are in the host backup
};

struct Run {  // consecutive pages of one session restored into consecutive staging pages
  int sidx, page0, count, staging0;
};

class Testbed {
 public:
  explicit Testbed(const arb_config& in);
  ~Testbed();
  void step(const uint64_t* sessions, const int32_t* ctx, int n, arb_request_result* out);
  arb_stats stats() const { return stats_; }
  arb_pass_timing bench_pass(int requests, int iters);

 private:
  void release();
  int pages_for(int len) const { return (len + kPage - 1) / kPage; }
  int clamp_len(int32_t c) const { return (c <= 0 || c > cfg_.context_len) ? cfg_.context_len : c; }
  int session_index(uint64_t id);
  void lru_unlink(int s);
  void lru_push_tail(int s);
  void lru_push_head(int s);
  int take_slot();
  void run_pass(const uint64_t* sessions, const int32_t* ctx, int n, arb_request_result* out);
  void enqueue_indexer(int rows, int max_len, bool restores);

  arb_config cfg_{};
  int page_bytes_ = 0, max_pages_ = 0, ld_ = 0;
  uint64_t tick_ = 0;
  uint64_t rng_ = 0;
  arb_stats stats_{};

  cudaStream_t compute_ = nullptr, load_ = nullptr;
  std::vector<cudaEvent_t> restored_;  // one per layer, recorded on the load stream

  uint8_t* pool_ = nullptr;
  unsigned long long* stamps_ = nullptr;
  uint8_t* staging_ = nullptr;
  uint8_t* backup_ = nullptr;  // pinned: [max_sessions][layers][max_pages][page_bytes]
  float* scores_ = nullptr;
  int32_t* sel_ = nullptr;      // [layers][max_batch][k]
  int32_t* ref_sel_ = nullptr;  // [max_batch][k]

  Mirror<int32_t> page_table_, lens_, inter_, stale_, rec_slots_, rec_pages_, res_slots_;
  Mirror<unsigned long long> tags_, sessions_, rec_sessions_, res_tags_;
  Mirror<uint32_t> steps_;

  std::vector<int> slot_owner_sidx_, slot_owner_page_, slot_prev_, slot_next_;
  std::vector<uint64_t> slot_tick_;
  int lru_head_ = -1, lru_tail_ = -1;
  std::vector<Session> sess_;
  std::unordered_map<uint64_t, int> by_id_;
};

Testbed::Testbed(const arb_config& in) : cfg_(in) {
  if (cfg_.dtype != ARB_DTYPE_FP8 && cfg_.dtype != ARB_DTYPE_BF16)
    throw Failure("config: dtype " + std::to_string(cfg_.dtype) + " is neither fp8 (0) nor bf16 (1)");
  if (cfg_.pool_pages == 0) cfg_.pool_pages = 2048;
  if (cfg_.context_len == 0) cfg_.context_len = 4096;
  if (cfg_.heads == 0) cfg_.heads = 4;
  if (cfg_.layers == 0) cfg_.layers = 4;
  if (cfg_.max_sessions == 0) cfg_.max_sessions = 128;
  if (cfg_.max_batch == 0) cfg_.max_batch = 64;
  if (cfg_.layer_work_us == 0) cfg_.layer_work_us = 40;
  if (cfg_.layer_work_us < 0) cfg_.layer_work_us = 0;
  if (cfg_.context_len < 1 || cfg_.context_len > kMaxContext)
    throw Failure("config: context_len " + std::to_string(cfg_.context_len) + " outside 1..32768");
  if (cfg_.heads < 1 || cfg_.heads > 64) throw Failure("config: heads outside 1..64");
  if (cfg_.layers < 1 || cfg_.layers > 64) throw Failure("config: layers outside 1..64");
  if (cfg_.max_batch < 1) throw Failure("config: max_batch < 1");
  page_bytes_ = kPage * token_bytes(cfg_.dtype);
  max_pages_ = pages_for(cfg_.context_len);
  ld_ = max_pages_ * kPage;
  if (cfg_.pool_pages < max_pages_)
    throw Failure("config: pool_pages " + std::to_string(cfg_.pool_pages) +
                  " cannot hold one context of " + std::to_string(max_pages_) + " pages");
  if (cfg_.max_sessions < cfg_.max_batch)
    throw Failure("config: max_sessions must be at least max_batch");
  rng_ = mix64(cfg_.seed ^ 0xD1B54A32D192ED03ull);
  try {
    CK(cudaSetDevice(cfg_.device));
    CK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&load_, cudaStreamNonBlocking));
    restored_.resize(cfg_.layers, nullptr);
    for (auto& e : restored_) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const size_t L = cfg_.layers, P = cfg_.pool_pages, B = cfg_.max_batch;
    CK(cudaMalloc(&pool_, L * P * page_bytes_));
    CK(cudaMalloc(&stamps_, L * P * sizeof(unsigned long long)));
    CK(cudaMalloc(&staging_, L * P * page_bytes_));
    CK(cudaHostAlloc(&backup_, (size_t)cfg_.max_sessions * L * max_pages_ * page_bytes_, cudaHostAllocDefault));
    CK(cudaMalloc(&scores_, B * ld_ * sizeof(float)));
    CK(cudaMalloc(&sel_, L * B * kTopK * sizeof(int32_t)));
    CK(cudaMalloc(&ref_sel_, B * kTopK * sizeof(int32_t)));
    page_table_.alloc(B * max_pages_);
    tags_.alloc(B * max_pages_);
    lens_.alloc(B);
    sessions_.alloc(B);
    steps_.alloc(B);
    inter_.alloc(B * L);
    stale_.alloc(B);
    rec_slots_.alloc(P);
    rec_pages_.alloc(P);
    rec_sessions_.alloc(P);
    res_slots_.alloc(P);
    res_tags_.alloc(P);
    // Every slot starts with the bytes of a phantom owner: a fresh slot must not hold zeros,
    // which would make a stale read stand out in ways a reused slot does not.
    for (size_t s = 0; s < P; ++s) {
      rec_slots_.h[s] = (int32_t)s;
      rec_pages_.h[s] = (int32_t)(s % max_pages_);
      rec_sessions_.h[s] = 0xFFFFFFFFFFFF0000ull + s / max_pages_;
    }
    rec_slots_.up(P, compute_);
    rec_pages_.up(P, compute_);
    rec_sessions_.up(P, compute_);
    recompute_kernel<<<dim3((unsigned)P, (unsigned)L), kScoreThreads, 0, compute_>>>(
        pool_, stamps_, cfg_.pool_pages, page_bytes_, cfg_.dtype, rec_slots_.d, rec_pages_.d,
        rec_sessions_.d, cfg_.seed);
    CK_LAUNCH("recompute_kernel");
    CK(cudaStreamSynchronize(compute_));
  } catch (...) {
    release();
    throw;
  }
  slot_owner_sidx_.assign(cfg_.pool_pages, -1);
  slot_owner_page_.assign(cfg_.pool_pages, -1);
  slot_prev_.assign(cfg_.pool_pages, -1);
  slot_next_.assign(cfg_.pool_pages, -1);
  slot_tick_.assign(cfg_.pool_pages, 0);
  for (int s = 0; s < cfg_.pool_pages; ++s) lru_push_tail(s);
  sess_.resize(cfg_.max_sessions);
}

void Testbed::release() {
  if (compute_) cudaStreamSynchronize(compute_);
  if (load_) cudaStreamSynchronize(load_);
  for (auto e : restored_)
    if (e) cudaEventDestroy(e);
  restored_.clear();
  if (pool_) cudaFree(pool_);
  if (stamps_) cudaFree(stamps_);
  if (staging_) cudaFree(staging_);
  if (backup_) cudaFreeHost(backup_);
  if (scores_) cudaFree(scores_);
  if (sel_) cudaFree(sel_);
  if (ref_sel_) cudaFree(ref_sel_);
  pool_ = staging_ = backup_ = nullptr;
  stamps_ = nullptr;
  scores_ = nullptr;
  sel_ = ref_sel_ = nullptr;
  page_table_.release();
  tags_.release();
  lens_.release();
  sessions_.release();
  steps_.release();
  inter_.release();
  stale_.release();
  rec_slots_.release();
  rec_pages_.release();
  rec_sessions_.release();
  res_slots_.release();
  res_tags_.release();
  if (compute_) cudaStreamDestroy(compute_);
  if (load_) cudaStreamDestroy(load_);
  compute_ = load_ = nullptr;
}

Testbed::~Testbed() { release(); }

void Testbed::lru_unlink(int s) {
  const int p = slot_prev_[s], n = slot_next_[s];
  if (p >= 0) slot_next_[p] = n; else lru_head_ = n;
  if (n >= 0) slot_prev_[n] = p; else lru_tail_ = p;
  slot_prev_[s] = slot_next_[s] = -1;
}

void Testbed::lru_push_tail(int s) {
  slot_prev_[s] = lru_tail_;
  slot_next_[s] = -1;
  if (lru_tail_ >= 0) slot_next_[lru_tail_] = s; else lru_head_ = s;
  lru_tail_ = s;
}

void Testbed::lru_push_head(int s) {
  slot_next_[s] = lru_head_;
  slot_prev_[s] = -1;
  if (lru_head_ >= 0) slot_prev_[lru_head_] = s; else lru_tail_ = s;
  lru_head_ = s;
}

// take_slot evicts the least recently used slot. Its bytes stay as they are: only the
// restore or recompute that follows overwrites them.
int Testbed::take_slot() {
  const int s = lru_head_;
  if (s < 0 || slot_tick_[s] == tick_) throw Failure("pool: every slot is in use by this pass");
  if (slot_owner_sidx_[s] >= 0) {
    sess_[slot_owner_sidx_[s]].resident[slot_owner_page_[s]] = -1;
    ++stats_.evictions;
  }
  lru_unlink(s);
  lru_push_tail(s);
  slot_tick_[s] = tick_;
  return s;
}

int Testbed::session_index(uint64_t id) {
  auto it = by_id_.find(id);
  if (it != by_id_.end()) return it->second;
  int victim = -1;
  for (int i = 0; i < (int)sess_.size(); ++i) {
    if (!sess_[i].live) {
      victim = i;
      break;
    }
    if (sess_[i].last_tick < tick_ && (victim < 0 || sess_[i].last_tick < sess_[victim].last_tick)) victim = i;
  }
  if (victim < 0) throw Failure("sessions: more sessions in one pass than max_sessions");
  Session& s = sess_[victim];
  if (s.live) {
    by_id_.erase(s.id);
    for (int p = 0; p < (int)s.resident.size(); ++p) {
      const int slot = s.resident[p];
      if (slot < 0) continue;
      slot_owner_sidx_[slot] = -1;
      slot_owner_page_[slot] = -1;
      lru_unlink(slot);
      lru_push_head(slot);
    }
  }
  s.id = id;
  s.key = session_key(cfg_.seed, id);
  s.live = true;
  s.step = 0;
  s.last_tick = tick_;
  s.resident.assign(max_pages_, -1);
  s.backed.assign(max_pages_, 0);
  by_id_[id] = victim;
  return victim;
}

void Testbed::step(const uint64_t* sessions, const int32_t* ctx, int n, arb_request_result* out) {
  if (n < 0) throw Failure("step: negative request count");
  if (n > 0 && (!sessions || !out)) throw Failure("step: sessions and out must not be NULL");
  CK(cudaSetDevice(cfg_.device));  // the current device is per host thread
  ++stats_.steps;
  int i = 0;
  while (i < n) {
    int pages = 0, j = i;
    while (j < n && j - i < cfg_.max_batch) {
      const int p = pages_for(clamp_len(ctx ? ctx[j] : 0));
      if (pages + p > cfg_.pool_pages) break;
      pages += p;
      ++j;
    }
    run_pass(sessions + i, ctx ? ctx + i : nullptr, j - i, out + i);
    i = j;
  }
}

void Testbed::run_pass(const uint64_t* sessions, const int32_t* ctx, int rows, arb_request_result* out) {
  ++tick_;
  ++stats_.passes;
  const size_t L = cfg_.layers;
  int nrec = 0, nres = 0, max_len = 0;
  std::vector<Run> runs;
  std::vector<int> restored(rows, 0), recomputed(rows, 0);
  for (int r = 0; r < rows; ++r) {
    const int sidx = session_index(sessions[r]);
    Session& s = sess_[sidx];
    s.last_tick = tick_;
    const int len = clamp_len(ctx ? ctx[r] : 0);
    max_len = std::max(max_len, len);
    sessions_.h[r] = s.id;
    steps_.h[r] = ++s.step;
    lens_.h[r] = len;
    for (int p = 0; p < pages_for(len); ++p) {
      int slot = s.resident[p];
      if (slot >= 0) {
        lru_unlink(slot);
        lru_push_tail(slot);
        slot_tick_[slot] = tick_;
      } else {
        slot = take_slot();
        slot_owner_sidx_[slot] = sidx;
        slot_owner_page_[slot] = p;
        s.resident[p] = slot;
        if (cfg_.hicache && s.backed[p]) {
          res_slots_.h[nres] = slot;
          res_tags_.h[nres] = page_tag(s.key, p);
          if (!runs.empty() && runs.back().sidx == sidx && runs.back().page0 + runs.back().count == p)
            ++runs.back().count;
          else
            runs.push_back(Run{sidx, p, 1, nres});
          ++nres;
          ++restored[r];
        } else {
          rec_slots_.h[nrec] = slot;
          rec_pages_.h[nrec] = p;
          rec_sessions_.h[nrec] = s.id;
          ++nrec;
          ++recomputed[r];
          if (cfg_.hicache && !s.backed[p]) {
            // Write-through: a computed page is backed up at once, as HiCache does.
            for (int l = 0; l < (int)L; ++l)
              fill_page_host(backup_ + (((size_t)sidx * L + l) * max_pages_ + p) * page_bytes_, s.key, p, l,
                             cfg_.dtype);
            s.backed[p] = 1;
          }
        }
      }
      page_table_.h[(size_t)r * max_pages_ + p] = slot;
      tags_.h[(size_t)r * max_pages_ + p] = page_tag(s.key, p);
    }
  }

  // Compute stream: descriptors, then recomputes, ordered before any read.
  page_table_.up((size_t)rows * max_pages_, compute_);
  tags_.up((size_t)rows * max_pages_, compute_);
  lens_.up(rows, compute_);
  sessions_.up(rows, compute_);
  steps_.up(rows, compute_);
  CK(cudaMemsetAsync(stale_.d, 0, rows * sizeof(int32_t), compute_));
  if (nrec > 0) {
    rec_slots_.up(nrec, compute_);
    rec_pages_.up(nrec, compute_);
    rec_sessions_.up(nrec, compute_);
    recompute_kernel<<<dim3((unsigned)nrec, (unsigned)L), kScoreThreads, 0, compute_>>>(
        pool_, stamps_, cfg_.pool_pages, page_bytes_, cfg_.dtype, rec_slots_.d, rec_pages_.d,
        rec_sessions_.d, cfg_.seed);
    CK_LAUNCH("recompute_kernel");
  }
  // Load stream: restores layer by layer, each closed by its event.
  if (nres > 0) {
    res_slots_.up(nres, load_);
    res_tags_.up(nres, load_);
    for (size_t l = 0; l < L; ++l) {
      uint8_t* stage = staging_ + l * cfg_.pool_pages * (size_t)page_bytes_;
      for (const Run& run : runs) {
        const uint8_t* src = backup_ + (((size_t)run.sidx * L + l) * max_pages_ + run.page0) * page_bytes_;
        CK(cudaMemcpyAsync(stage + (size_t)run.staging0 * page_bytes_, src, (size_t)run.count * page_bytes_,
                           cudaMemcpyHostToDevice, load_));
      }
      restore_scatter_kernel<<<nres, kScoreThreads, 0, load_>>>(
          stage, pool_ + l * cfg_.pool_pages * (size_t)page_bytes_, stamps_ + l * cfg_.pool_pages, res_slots_.d,
          res_tags_.d, page_bytes_);
      CK_LAUNCH("restore_scatter_kernel");
      CK(cudaEventRecord(restored_[l], load_));
    }
  }
  enqueue_indexer(rows, max_len, nres > 0);
  inter_.down(rows * L, compute_);
  stale_.down(rows, compute_);
  CK(cudaStreamSynchronize(compute_));
  CK(cudaStreamSynchronize(load_));

  for (int r = 0; r < rows; ++r) {
    const int len = lens_.h[r];
    const int k = std::min(kTopK, len);
    float worst = 1.0f;
    int corrupted = 0;
    for (size_t l = 0; l < L; ++l) {
      const int in = inter_.h[r * L + l];
      if (in < k) corrupted = 1;
      worst = std::min(worst, (float)in / (float)(2 * k - in));
    }
    out[r].corrupted = corrupted;
    out[r].stale_pages = stale_.h[r];
    out[r].restored_pages = restored[r];
    out[r].recomputed_pages = recomputed[r];
    out[r].jaccard = worst;
    out[r].reserved = 0;
    stats_.request_steps++;
    stats_.corrupted_steps += corrupted;
    stats_.stale_pages += stale_.h[r];
    stats_.restored_pages += restored[r];
    stats_.recomputed_pages += recomputed[r];
    stats_.jaccard_sum += worst;
  }
}

void Testbed::enqueue_indexer(int rows, int max_len, bool restores) {
  const int L = cfg_.layers;
  const size_t smem = (size_t)cfg_.heads * 8 * 5 * sizeof(float4);
  const dim3 grid((unsigned)pages_for(max_len), (unsigned)rows);
  ScoreArgs a{pool_,        stamps_, page_table_.d, tags_.d,        sessions_.d, steps_.d,  lens_.d,
              scores_,      stale_.d, cfg_.seed,    cfg_.pool_pages, page_bytes_, max_pages_, ld_,
              cfg_.heads,   0};
  for (int l = 0; l < L; ++l) {
    rng_ = mix64(rng_ + 1);
    const uint64_t work_ns = (rng_ % ((uint64_t)cfg_.layer_work_us + 1)) * 1000ull;
    layer_work_kernel<<<1, 1, 0, compute_>>>(work_ns);
    CK_LAUNCH("layer_work_kernel");
    if (cfg_.gate && restores) CK(cudaStreamWaitEvent(compute_, restored_[l], 0));
    a.layer = l;
    if (cfg_.dtype == ARB_DTYPE_FP8)
      score_kernel<ARB_DTYPE_FP8, false><<<grid, kScoreThreads, smem, compute_>>>(a);
    else
      score_kernel<ARB_DTYPE_BF16, false><<<grid, kScoreThreads, smem, compute_>>>(a);
    CK_LAUNCH("score_kernel");
    launch_topk(scores_, ld_, lens_.d, rows, max_len, kTopK, sel_ + (size_t)l * cfg_.max_batch * kTopK, compute_, 0);
  }
  // The canonical pass runs after every read, so it does not change the race's timing.
  for (int l = 0; l < L; ++l) {
    a.layer = l;
    if (cfg_.dtype == ARB_DTYPE_FP8)
      score_kernel<ARB_DTYPE_FP8, true><<<grid, kScoreThreads, smem, compute_>>>(a);
    else
      score_kernel<ARB_DTYPE_BF16, true><<<grid, kScoreThreads, smem, compute_>>>(a);
    CK_LAUNCH("score_kernel canonical");
    launch_topk(scores_, ld_, lens_.d, rows, max_len, kTopK, ref_sel_, compute_, 0);
    compare_kernel<<<rows, 256, 0, compute_>>>(sel_ + (size_t)l * cfg_.max_batch * kTopK, ref_sel_, lens_.d,
                                                 kTopK, L, l, inter_.d);
    CK_LAUNCH("compare_kernel");
  }
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

arb_pass_timing Testbed::bench_pass(int requests, int iters) {
  if (requests < 1 || requests > cfg_.max_batch || requests * max_pages_ > cfg_.pool_pages)
    throw Failure("bench: " + std::to_string(requests) + " requests do not fit one pass of the pool");
  if (iters < 1) throw Failure("bench: iters < 1");
  std::vector<uint64_t> ids(requests);
  std::vector<int32_t> lens(requests, cfg_.context_len);
  std::vector<arb_request_result> res(requests);
  for (int r = 0; r < requests; ++r) ids[r] = 0xBE0C000000000000ull + r;
  step(ids.data(), lens.data(), requests, res.data());  // makes them resident, one pass
  const size_t smem = (size_t)cfg_.heads * 8 * 5 * sizeof(float4);
  const dim3 grid((unsigned)max_pages_, (unsigned)requests);
  ScoreArgs a{pool_,        stamps_, page_table_.d, tags_.d,        sessions_.d, steps_.d,  lens_.d,
              scores_,      stale_.d, cfg_.seed,    cfg_.pool_pages, page_bytes_, max_pages_, ld_,
              cfg_.heads,   0};
  cudaEvent_t e0, e1, e2;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  std::vector<float> ms, score_ms, select_ms;
  for (int it = -3; it < iters; ++it) {
    CK(cudaEventRecord(e0, compute_));
    if (cfg_.dtype == ARB_DTYPE_FP8)
      score_kernel<ARB_DTYPE_FP8, false><<<grid, kScoreThreads, smem, compute_>>>(a);
    else
      score_kernel<ARB_DTYPE_BF16, false><<<grid, kScoreThreads, smem, compute_>>>(a);
    CK_LAUNCH("score_kernel");
    CK(cudaEventRecord(e1, compute_));
    launch_topk(scores_, ld_, lens_.d, requests, cfg_.context_len, kTopK, sel_, compute_, 0);
    CK(cudaEventRecord(e2, compute_));
    CK(cudaEventSynchronize(e2));
    float t01 = 0, t12 = 0, t02 = 0;
    CK(cudaEventElapsedTime(&t01, e0, e1));
    CK(cudaEventElapsedTime(&t12, e1, e2));
    CK(cudaEventElapsedTime(&t02, e0, e2));
    if (it >= 0) {
      ms.push_back(t02);
      score_ms.push_back(t01);
      select_ms.push_back(t12);
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  arb_pass_timing out{};
  out.score_ms = median(score_ms);
  out.select_ms = median(select_ms);
  out.median_ms = median(ms);
  const double tokens = (double)requests * cfg_.context_len;
  out.index_k_bytes = tokens * token_bytes(cfg_.dtype);
  out.total_bytes = out.index_k_bytes + tokens * 4.0 * 2.0 + (double)requests * kTopK * 4.0;
  return out;
}

template <typename F>
int32_t guarded(F&& f) {
  try {
    f();
    g_err.clear();
    return 0;
  } catch (const std::exception& e) {
    g_err = e.what();
  } catch (...) {
    g_err = "unknown failure";
  }
  return -1;
}

}  // namespace

extern "C" {

int32_t arb_abi_version(void) { return ARB_ABI_VERSION; }

const char* arb_last_error(void) { return g_err.c_str(); }

int32_t arb_device_count(void) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice) {
    g_err = "cudaGetDeviceCount: no CUDA device";
    return 0;
  }
  if (e != cudaSuccess) {
    g_err = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    return -1;
  }
  return n;
}

int32_t arb_device_name(int32_t device, char* buf, int32_t len) {
  return guarded([&] {
    if (!buf || len < 1) throw Failure("device_name: empty buffer");
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, device));
    std::snprintf(buf, (size_t)len, "%s", p.name);
  });
}

void* arb_testbed_create(const arb_config* cfg) {
  Testbed* tb = nullptr;
  const int32_t rc = guarded([&] {
    if (!cfg) throw Failure("testbed_create: config is NULL");
    tb = new Testbed(*cfg);
  });
  return rc == 0 ? tb : nullptr;
}

void arb_testbed_destroy(void* tb) { delete static_cast<Testbed*>(tb); }

int32_t arb_step(void* tb, const uint64_t* sessions, const int32_t* ctx_tokens, int32_t n,
                 arb_request_result* out) {
  return guarded([&] {
    if (!tb) throw Failure("step: testbed is NULL");
    static_cast<Testbed*>(tb)->step(sessions, ctx_tokens, n, out);
  });
}

int32_t arb_get_stats(void* tb, arb_stats* out) {
  return guarded([&] {
    if (!tb || !out) throw Failure("stats: NULL argument");
    *out = static_cast<Testbed*>(tb)->stats();
  });
}

int32_t arb_topk_f32(const float* scores, int32_t rows, int32_t cols, int32_t k, int32_t* out_idx,
                     void* stream, int32_t variant) {
  return guarded([&] {
    launch_topk(scores, cols, nullptr, rows, cols, k, out_idx, static_cast<cudaStream_t>(stream), variant);
  });
}

int32_t arb_bench_copy(int64_t bytes, int32_t iters, double* tbps) {
  return guarded([&] {
    if (bytes < 16 || iters < 1 || !tbps) throw Failure("bench_copy: bad arguments");
    void *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, (size_t)bytes));
    CK(cudaMalloc(&b, (size_t)bytes));
    CK(cudaMemset(a, 0x5A, (size_t)bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int it = -3; it < iters; ++it) {
      CK(cudaEventRecord(e0, 0));
      CK(cudaMemcpyAsync(it % 2 ? a : b, it % 2 ? b : a, (size_t)bytes, cudaMemcpyDeviceToDevice, 0));
      CK(cudaEventRecord(e1, 0));
      CK(cudaEventSynchronize(e1));
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 0) ms.push_back(t);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    *tbps = 2.0 * (double)bytes / (median(ms) * 1e-3) / 1e12;
  });
}

int32_t arb_bench_pass(void* tb, int32_t requests, int32_t iters, arb_pass_timing* out) {
  return guarded([&] {
    if (!tb || !out) throw Failure("bench_pass: NULL argument");
    *out = static_cast<Testbed*>(tb)->bench_pass(requests, iters);
  });
}

}  // extern "C"
