package orchestrator

import (
	"regexp"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

func results(rs []PinResult) string {
	var out []string
	for _, r := range rs {
		s := string(r.Status) + ": " + r.Text()
		if r.Common {
			s += " (common)"
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// An engine's log is read at its last line that reports a setting, the value taken
// from the group named value or else the first; settings of the engine's configuration
// are attested only where a rule names them.
func TestAttestFromTheLog(t *testing.T) {
	t.Parallel()
	p := arms.PresetFor("ollama")
	p.Attest = append(p.Attest, arms.AttestRule{Pin: "X", Log: regexp.MustCompile(`(x)=(?P<value>\d+)`)})
	log := []byte("llama_kv_cache_init: kv_size = 4096, type_k = 'q8_0', type_v = 'q8_0'\n" +
		"llama_init_from_model: flash_attn    = 1\n" +
		"x=7\n" +
		"llama_kv_cache_init: kv_size = 4096, type_k = 'f16', type_v = 'f16'\n" +
		"llama_init_from_model: flash_attn    = 0") // the last line has no newline
	pins := arms.Pins{Env: map[string]string{"OLLAMA_KV_CACHE_TYPE": "q8_0", "X": "7", "OLLAMA_LOAD_TIMEOUT": "5m"}}
	common := arms.Pins{Env: map[string]string{"OLLAMA_FLASH_ATTENTION": "true", "OLLAMA_MODELS": "/m", "OLLAMA_NUM_PARALLEL": "4"}}
	got := results(attest(p, p.Grammar, pins, common, observation{log: log}))
	want := `not_in_effect: OLLAMA_KV_CACHE_TYPE is f16, pinned q8_0
unverified: OLLAMA_LOAD_TIMEOUT (nothing the ollama preset reads reports it; engine.attest can say where the engine does)
verified: X=7
not_in_effect: OLLAMA_FLASH_ATTENTION is 0, pinned true (common)
unverified: OLLAMA_NUM_PARALLEL (the engine's log has no line that reports it) (common)`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	rs := attest(p, p.Grammar, pins, arms.Pins{}, observation{log: log})
	if r := rs[0]; r.Evidence != "llama_kv_cache_init: kv_size = 4096, type_k = 'f16', type_v = 'f16'" || r.Source != `log /type_k = '([^']+)'/` ||
		!strings.Contains(r.Why, "flash attention") {
		t.Errorf("the mismatch's evidence: %+v", r)
	}
	// An engine whose log cannot be read leaves its pins unverified, saying why.
	rs = attest(p, p.Grammar, arms.Pins{Env: map[string]string{"OLLAMA_KV_CACHE_TYPE": "q8_0"}}, arms.Pins{}, observation{logWhy: "arbiter keeps no log of an engine it did not start"})
	if rs[0].Status != store.PinUnverified || rs[0].Why != "arbiter keeps no log of an engine it did not start" {
		t.Errorf("no log: %+v", rs[0])
	}
}

// A metric is read at its label on its first series, or at its value; a boolean rule
// reads True and 1 alike.
func TestAttestFromMetrics(t *testing.T) {
	t.Parallel()
	fams, err := parseMetrics(strings.NewReader(`# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="fp8",enable_prefix_caching="True"} 1.0
# TYPE vllm:num_gpu_blocks gauge
vllm:num_gpu_blocks 6374
`))
	if err != nil {
		t.Fatal(err)
	}
	p := arms.PresetFor("vllm")
	p.Attest = append(p.Attest, arms.AttestRule{Pin: "--num-gpu-blocks", Metric: "vllm:num_gpu_blocks"},
		arms.AttestRule{Pin: "--enable-chunked-prefill", Metric: "vllm:cache_config_info", Label: "chunked"})
	pins := arms.Pins{Args: []string{"--kv-cache-dtype", "fp8", "--enable-prefix-caching", "--num-gpu-blocks", "6374.0", "--block-size=32", "--enable-chunked-prefill"}}
	got := results(attest(p, p.Grammar, pins, arms.Pins{}, observation{metrics: fams}))
	want := `verified: --kv-cache-dtype fp8
verified: --enable-prefix-caching
verified: --num-gpu-blocks 6374.0
not_in_effect: --block-size is 16, pinned 32
unverified: --enable-chunked-prefill (the engine's metrics do not report it)`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	rs := attest(p, p.Grammar, pins, arms.Pins{}, observation{metricsWhy: "the engine serves no metrics"})
	if rs[0].Status != store.PinUnverified || rs[0].Why != "the engine serves no metrics" {
		t.Errorf("no metrics: %+v", rs[0])
	}
}

// Server info is read at a dotted key; a key under something that is not an object is
// unverified, saying what it is.
func TestAttestFromServerInfo(t *testing.T) {
	t.Parallel()
	p := arms.Preset{Name: "custom", Attest: []arms.AttestRule{{Pin: "--page-size", ServerInfo: "cache.page_size"}, {Pin: "--tp", ServerInfo: "parallel.tp"}}}
	info, err := parseServerInfo([]byte(`{"cache": {"page_size": 64}, "parallel": [8]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := results(attest(p, arms.Grammar{}, arms.Pins{Args: []string{"--page-size", "64", "--tp", "8"}}, arms.Pins{}, observation{info: info}))
	want := `verified: --page-size 64
unverified: --tp (server info's parallel is a list, not an object)`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// FuzzAttest feeds hostile logs and metrics to the attestation's readers: every pin gets
// exactly one outcome, and a pin said to be in effect or not was read from what the
// engine wrote.
func FuzzAttest(f *testing.F) {
	f.Add([]byte("llama_kv_cache_init: type_k = 'f16'\nflash_attn = 0\n--parallel 4"), []byte("# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{cache_dtype=\"fp8\"} 1\n"), "q8_0", "fp8")
	f.Add([]byte("type_k = '\x00'\r\ntype_k = ''"), []byte("vllm:cache_config_info{cache_dtype=\"\\\"\"} NaN"), "", "--x")
	f.Add([]byte{}, []byte("{}"), "1", "")
	p := arms.PresetFor("ollama")
	p.Attest = append(p.Attest, arms.PresetFor("vllm").Attest...)
	f.Fuzz(func(t *testing.T, log, metrics []byte, kv, dtype string) {
		fams, _ := parseMetrics(strings.NewReader(string(metrics)))
		pins := arms.Pins{Env: map[string]string{"OLLAMA_KV_CACHE_TYPE": kv, "OLLAMA_FLASH_ATTENTION": kv}, Args: []string{"--kv-cache-dtype", dtype}}
		rs := attest(p, arms.PresetFor("vllm").Grammar, pins, arms.Pins{}, observation{log: log, metrics: fams})
		flags, _ := arms.PresetFor("vllm").Grammar.Parse(pins.Args)
		if len(rs) != 2+len(flags) {
			t.Fatalf("%d outcomes for %d pins: %+v", len(rs), 2+len(flags), rs)
		}
		for _, r := range rs {
			if r.Status != store.PinUnverified && r.Evidence == "" && r.Source != "" && !strings.HasPrefix(r.Source, "metric") {
				t.Errorf("%s judged %s without evidence", r.Pin, r.Status)
			}
			if r.Status == store.PinUnverified && r.Why == "" {
				t.Errorf("%s unverified without a reason", r.Pin)
			}
		}
	})
}

// What an engine reports for a pin is kept and shown inert and bounded: a 2.7 MB value
// full of terminal escapes is neither stored nor printed whole.
func TestAReportedValueIsBoundedAndInert(t *testing.T) {
	t.Parallel()
	p := arms.PresetFor("ollama")
	p.Attest = append(p.Attest, arms.AttestRule{Pin: "X", Log: regexp.MustCompile(`x=(?P<value>.*)`)})
	huge := "\x1b]0;owned\x07\x1b[2J" + strings.Repeat("v", 2700000)
	rs := attest(p, p.Grammar, arms.Pins{Env: map[string]string{"X": "7"}}, arms.Pins{}, observation{log: []byte("x=" + huge + "\n")})
	var x *PinResult
	for i := range rs {
		if rs[i].Pin == "X" {
			x = &rs[i]
		}
	}
	if x == nil || x.Status != store.PinNotInEffect {
		t.Fatalf("results %+v", rs)
	}
	for _, s := range []string{x.Got, x.Evidence, newPinCheck(rs).Mismatched[0]} {
		if len(s) > 2*maxReportedBytes+64 || strings.ContainsAny(s, "\x1b\x07") {
			t.Errorf("%d bytes kept or shown, escapes in them: %v", len(s), strings.ContainsAny(s, "\x1b\x07"))
		}
	}
}
