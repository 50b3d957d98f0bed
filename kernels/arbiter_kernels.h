/*
 * arbiter_kernels.h: C ABI of arbiter's GPU testbed, a small sparse-attention indexer path
 * in which the stale-index-K race of the field's corruption story happens physically.
 *
 * A testbed holds a paged device pool of index-K (64 tokens per page, fp8 e4m3 with one
 * fp32 scale per 128 values = 132 B/token, or bf16 = 256 B/token), a pinned host backup
 * whose bytes are a deterministic function of (session, token, layer), LRU eviction that
 * leaves an evicted slot holding its previous owner's bytes, restores on a non-blocking load
 * stream with one event per layer, and a score + radix top-k selection on the compute stream.
 * With the gate on, the compute stream waits on each layer's restore event before the
 * indexer reads that layer; with it off, nothing orders the read after the restore.
 *
 * Every function is safe to call without a GPU: it fails and arb_last_error says why.
 * A testbed is not safe for concurrent use; callers serialize steps.
 *
 * The Go loader (package kernels) mirrors these structs field for field: keep them in sync.
 */
#ifndef ARBITER_KERNELS_H
#define ARBITER_KERNELS_H

#include <stdint.h>

#if defined(__GNUC__)
#define ARB_API __attribute__((visibility("default")))
#else
#define ARB_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ARB_ABI_VERSION changes whenever a struct or signature below changes. */
#define ARB_ABI_VERSION 2

#define ARB_DTYPE_FP8 0  /* 128 fp8 e4m3 bytes + one fp32 scale per token: 132 B/token */
#define ARB_DTYPE_BF16 1 /* 128 bf16 values per token: 256 B/token */

#define ARB_TOKENS_PER_PAGE 64
#define ARB_INDEX_DIM 128
#define ARB_TOPK 512

/* arb_config describes one testbed. Zero fields take the default written beside them. */
typedef struct arb_config {
  uint64_t seed;          /* content and query seed; default 0 is a valid seed */
  int32_t dtype;          /* ARB_DTYPE_FP8 or ARB_DTYPE_BF16 */
  int32_t hicache;        /* 1: pages that left the pool are restored from the host backup */
  int32_t gate;           /* 1: compute waits on the restore event before the indexer read */
  int32_t pool_pages;     /* device pool capacity in pages; default 2048 */
  int32_t context_len;    /* longest context a request may have, tokens; default 4096, max 32768 */
  int32_t heads;          /* indexer heads; default 4 */
  int32_t layers;         /* indexer layers; default 4 */
  int32_t max_sessions;   /* sessions the host backup holds at once; default 128 */
  int32_t max_batch;      /* requests per GPU pass; larger steps run in several passes; default 64 */
  int32_t layer_work_us;  /* compute ahead of each layer's read, uniform in [0, this] us; default 40, <0 none */
  int32_t device;         /* CUDA device ordinal; default 0 */
  int32_t reserved;       /* keep zero */
} arb_config;

/* arb_request_result is one request's outcome of one decode step. */
typedef struct arb_request_result {
  int32_t corrupted;        /* 1 when any layer's top-k selection differs from the canonical one */
  int32_t stale_pages;      /* page reads, over all layers, that saw a slot whose restore had not landed */
  int32_t restored_pages;   /* pages of this request restored from the host backup in this step */
  int32_t recomputed_pages; /* pages of this request computed on the compute stream in this step */
  float jaccard;            /* smallest over layers of |sel ∩ canonical| / |sel ∪ canonical| */
  int32_t reserved;
} arb_request_result;

/* arb_stats are a testbed's totals since creation. */
typedef struct arb_stats {
  uint64_t steps;            /* arb_step calls */
  uint64_t request_steps;    /* requests summed over steps */
  uint64_t corrupted_steps;  /* request steps whose selection differed */
  uint64_t stale_pages;      /* stale page reads */
  uint64_t restored_pages;   /* pages restored from the host backup */
  uint64_t recomputed_pages; /* pages computed on the compute stream */
  uint64_t evictions;        /* pool slots taken from another page */
  uint64_t passes;           /* GPU passes (a step larger than the pool or max_batch takes several) */
  double jaccard_sum;        /* sum of per-request jaccard, for the mean */
} arb_stats;

/* arb_pass_timing is what arb_bench_pass measured. */
typedef struct arb_pass_timing {
  double median_ms;      /* median over iterations of score + selection for all requests, one layer */
  double score_ms;       /* median of the score kernel alone */
  double select_ms;      /* median of the top-k selection alone */
  double index_k_bytes;  /* index-K bytes the pass reads */
  double total_bytes;    /* index-K read + scores written and read back + selections written */
} arb_pass_timing;

/* arb_abi_version returns ARB_ABI_VERSION of the library, so a loader can refuse a mismatch. */
ARB_API int32_t arb_abi_version(void);

/* arb_last_error returns the calling thread's last error message ("" when none). */
ARB_API const char* arb_last_error(void);

/* arb_device_count returns the number of CUDA devices, or -1 with arb_last_error set. */
ARB_API int32_t arb_device_count(void);

/* arb_device_name writes the device's name into buf (NUL-terminated); 0 on success. */
ARB_API int32_t arb_device_name(int32_t device, char* buf, int32_t len);

/* arb_testbed_create allocates a testbed; NULL on failure with arb_last_error set. */
ARB_API void* arb_testbed_create(const arb_config* cfg);

/* arb_testbed_destroy frees a testbed; NULL is ignored. */
ARB_API void arb_testbed_destroy(void* tb);

/*
 * arb_step runs one decode step for n running requests: sessions[i] names the request's
 * session (any 64-bit id), ctx_tokens[i] its context length (0 or more than context_len
 * means context_len). Pages not in the pool are restored (hicache) or recomputed, the
 * indexer runs on every layer, and out[i] receives request i's outcome. 0 on success.
 */
ARB_API int32_t arb_step(void* tb, const uint64_t* sessions, const int32_t* ctx_tokens, int32_t n,
                 arb_request_result* out);

/* arb_get_stats copies the testbed's totals into out; 0 on success. */
ARB_API int32_t arb_get_stats(void* tb, arb_stats* out);

/*
 * arb_topk_f32 selects, for each of rows rows of cols fp32 scores (device memory, row-major,
 * leading dimension cols), the indices of the k largest (ties broken by lowest index) into
 * out_idx (device memory, rows x k, unordered within a row). stream is a cudaStream_t or NULL.
 * variant: 0 picks the default; 1 one shared histogram, 2 warp-aggregated, 3 per-warp histograms.
 */
ARB_API int32_t arb_topk_f32(const float* scores, int32_t rows, int32_t cols, int32_t k, int32_t* out_idx,
                     void* stream, int32_t variant);

/* arb_bench_copy measures device-to-device cudaMemcpy bandwidth over bytes (read + written
 * counted), median of iters, into *tbps (TB/s). 0 on success. */
ARB_API int32_t arb_bench_copy(int64_t bytes, int32_t iters, double* tbps);

/* arb_bench_pass makes requests requests of context_len tokens resident and times the score
 * + top-k pass over them on layer 0, iters times. 0 on success. */
ARB_API int32_t arb_bench_pass(void* tb, int32_t requests, int32_t iters, arb_pass_timing* out);

#ifdef __cplusplus
}
#endif

#endif /* ARBITER_KERNELS_H */
