package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// blockPrompt is a one-message prompt that begins with the blocks named by ids (2048
// bytes each, 512 tokens) and ends with tail bytes of its own.
func blockPrompt(tail string, ids ...int) openai.ChatRequest {
	var b strings.Builder
	for _, id := range ids {
		block := fmt.Sprintf("block %d: ", id)
		b.WriteString((block + strings.Repeat("x", 2048))[:2048])
	}
	b.WriteString(tail)
	return openai.ChatRequest{Model: "refserve-agent", Messages: []openai.Message{{Role: "user", Content: b.String()}}}
}

// TestPrefixCacheMatchesPagesOfOneMessage: two prompts of one user message each that
// begin with the same blocks share them in the cache, page by page, though their
// messages differ: what a Mooncake trace's shared hash ids send.
func TestPrefixCacheMatchesPagesOfOneMessage(t *testing.T) {
	var c prefixCache
	c.device = 1 << 20
	a := blockPrompt(strings.Repeat("a", 900), 1, 2, 3)
	b := blockPrompt(strings.Repeat("b", 900), 1, 2, 3)
	ka, _ := promptPrefixes(&a)
	kb, _ := promptPrefixes(&b)
	c.insert(ka)
	cached, restored := c.match(kb, promptTokens(&b))
	// The role and three blocks: 4 + 3x2048 bytes, of which whole pages of 256 bytes match.
	if want := (4 + 3*2048) / 256 * 256 / 4; cached < want-64 || cached > (4+3*2048)/4 || restored != 0 {
		t.Fatalf("cached %d tokens (%d restored) of the shared 3 blocks; want about %d, none restored", cached, restored, want)
	}
	c2 := blockPrompt(strings.Repeat("c", 900), 9, 2, 3)
	kc, _ := promptPrefixes(&c2)
	if cached, _ := c.match(kc, promptTokens(&c2)); cached > 64 {
		t.Errorf("a prompt whose first block differs found %d tokens cached; want the role's page at most", cached)
	}
}

// TestHiCacheHostTierKeepsEvictedPrefixes: four prefixes visited in turn, with a device
// tier that holds two of them: without HiCache least-recently-used eviction drops each
// before it comes round again and nothing hits; with HiCache the evicted prefixes wait
// in the host tier and hit from the second round on.
func TestHiCacheHostTierKeepsEvictedPrefixes(t *testing.T) {
	rates := map[bool]float64{}
	for _, hicache := range []bool{false, true} {
		var c prefixCache
		c.device = 5000 // tokens: two prefixes of four blocks (2048 tokens) and their tails
		if hicache {
			c.host = 10000
		}
		var hit, total, restored int
		for i := range 24 {
			p := i % 4
			req := blockPrompt(fmt.Sprintf("request %d %s", i, strings.Repeat("t", 1200)), 10*p, 10*p+1, 10*p+2, 10*p+3)
			keys, _ := promptPrefixes(&req)
			n := promptTokens(&req)
			cached, r := c.match(keys, n)
			c.insert(keys)
			hit, total, restored = hit+cached, total+n, restored+r
			if c.held[tierDevice] > c.device || c.held[tierHost] > c.host {
				t.Fatalf("request %d: tiers hold %v tokens, over %d and %d", i, c.held, c.device, c.host)
			}
		}
		rates[hicache] = float64(hit) / float64(total)
		if !hicache && restored != 0 {
			t.Errorf("without HiCache %d tokens were restored from a host tier", restored)
		}
		if hicache && (restored == 0 || int64(restored) != c.hostHits) {
			t.Errorf("with HiCache %d tokens restored, %d counted; want some, the same", restored, c.hostHits)
		}
	}
	if rates[false] > 0.05 || rates[true] < 0.6 {
		t.Errorf("hit rate %.2f without HiCache, %.2f with; want about 0 and above 0.6", rates[false], rates[true])
	}
}

// TestHiCacheRaisesTheServedHitRate: the same through the server, as /metrics reports
// it: cached over prompt tokens, and the host tier's restored tokens.
func TestHiCacheRaisesTheServedHitRate(t *testing.T) {
	rates := map[bool]float64{}
	for _, hicache := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.MaxTotalTokens = 6000
		cfg.EnableHierarchicalCache = hicache
		_, base := startServer(t, cfg, nil)
		for i := range 16 {
			p := i % 4
			req := blockPrompt(fmt.Sprintf("request %d %s", i, strings.Repeat("t", 1200)), 10*p, 10*p+1, 10*p+2, 10*p+3)
			req.MaxTokens = 8
			chat(t, base, req)
		}
		rates[hicache] = metric(t, base, "sglang:cached_tokens_total") / metric(t, base, "sglang:prompt_tokens_total")
		host := metric(t, base, "refserve:hicache_host_hit_tokens_total")
		if (host > 0) != hicache {
			t.Errorf("HiCache %v: %v tokens restored from the host tier", hicache, host)
		}
	}
	if !(rates[true] > rates[false]+0.3) {
		t.Errorf("served hit rate %.2f without HiCache, %.2f with; want HiCache well above", rates[false], rates[true])
	}
}
