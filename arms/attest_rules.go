package arms

import "regexp"

// sglangAttest maps the flags SGLang reads under another name than its server info
// reports (argparse aliases); every other flag is reported under its own name.
var sglangAttest = []AttestRule{
	{Pin: "--tp", ServerInfo: "tp_size"},
	{Pin: "--dp", ServerInfo: "dp_size"},
}

// vllmAttest reads what vLLM reports of its cache configuration: the labels of its
// vllm:cache_config_info metric, one per CacheConfig field as the engine holds it
// (vllm/v1/metrics/loggers.py). cache_dtype is the dtype as asked for ("fp8"), not the
// one a kernel resolved it to. The rest of vLLM's configuration is not reported outside
// its development mode.
var vllmAttest = []AttestRule{
	{Pin: "--kv-cache-dtype", Metric: "vllm:cache_config_info", Label: "cache_dtype"},
	{Pin: "--block-size", Metric: "vllm:cache_config_info", Label: "block_size"},
	{Pin: "--gpu-memory-utilization", Metric: "vllm:cache_config_info", Label: "gpu_memory_utilization"},
	{Pin: "--enable-prefix-caching", Metric: "vllm:cache_config_info", Label: "enable_prefix_caching", Bool: true},
	{Pin: "--num-gpu-blocks-override", Metric: "vllm:cache_config_info", Label: "num_gpu_blocks_override"},
	{Pin: "--kv-offloading-size", Metric: "vllm:cache_config_info", Label: "kv_offloading_size"},
}

// ollamaAttest reads ollama's settings from its log: the server logs the runner's
// command line when it loads a model, and the runner (llama.cpp) logs the context it
// built. ollama takes OLLAMA_FLASH_ATTENTION and OLLAMA_KV_CACHE_TYPE as requests: it
// leaves flash attention off where the backend has none (on CPU), and without flash
// attention it keeps the KV cache in f16, saying so only in these lines.
var ollamaAttest = []AttestRule{
	{Pin: "OLLAMA_FLASH_ATTENTION", Log: regexp.MustCompile(`flash_attn\s*=\s*(\d)`), Bool: true,
		Note: "ollama turns flash attention on only where its backend has it"},
	{Pin: "OLLAMA_KV_CACHE_TYPE", Log: regexp.MustCompile(`type_k = '([^']+)'`),
		Note: "ollama quantizes the KV cache only with flash attention on, and keeps f16 otherwise"},
	{Pin: "OLLAMA_NUM_PARALLEL", Log: regexp.MustCompile(`--parallel (\d+)`)},
}
