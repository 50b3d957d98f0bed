package main

import (
	"container/list"
	"hash"
	"hash/fnv"

	"github.com/arbiterlab/arbiter/openai"
)

// The prefix cache stands in for SGLang's radix cache: a prompt whose beginning was
// prefilled before (the same tools and the same first messages, as every turn of a
// conversation resends, a system prompt that sessions share, or the first blocks of
// a long message that other requests begin with, as a Mooncake trace's prompts do)
// prefills only the rest. It matches pages of cachePageBytes bytes of a message's
// content and whole messages rather than tokens: a prefix is the tools plus the first k
// messages (and, inside a message, its first pages), named by a chained hash, and its
// length in tokens is counted as promptTokens counts (four bytes a token). A finished
// reply is cached with the prompt it answered, so the next turn, which resends it, finds
// it.
//
// The device tier holds --max-total-tokens tokens; least recently used prefixes are
// evicted from it first. Without HiCache an evicted prefix is gone; with HiCache
// (--enable-hierarchical-cache) it moves to the host tier (--hicache-ratio times the
// device tier), which still hits: a host hit is restored to the device tier, at a small
// cost per token (timing.go's restore), and the host tier evicts its own least recently
// used prefixes when full. Only timing and the hit rate read the cache: no fault
// depends on it.

// cachePageBytes is the page a message's content is matched by: 64 tokens.
const cachePageBytes = 256

// prefixKey is one prefix of a prompt: its chained hash and its length in tokens.
type prefixKey struct {
	hash   uint64
	tokens int
}

// promptPrefixes lists the prefixes of a request's prompt, shortest first: the tools,
// then each page of each message and each message whole in turn, and the bytes
// promptTokens counts of the whole. The last prefix is the whole prompt less the token
// promptTokens adds.
func promptPrefixes(req *openai.ChatRequest) ([]prefixKey, int) {
	h := fnv.New64a()
	bytes := 0
	for _, t := range req.Tools {
		h.Write([]byte(t.Function.Name))
		h.Write([]byte{0})
		h.Write([]byte(t.Function.Description))
		h.Write([]byte{0})
		h.Write(t.Function.Parameters)
		h.Write([]byte{1})
		bytes += len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters)
	}
	keys := make([]prefixKey, 0, len(req.Messages)+1)
	chain := h.Sum64()
	keys = append(keys, prefixKey{hash: chain, tokens: bytes / 4})
	for _, m := range req.Messages {
		keys, bytes = extendPrefix(keys, chain, bytes, m)
		chain = keys[len(keys)-1].hash
	}
	return keys, bytes
}

// chained is a hash that goes on from the prefix of hash chain.
func chained(chain uint64) hash.Hash64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(chain >> (8 * i))
	}
	h.Write(b[:])
	return h
}

// extendPrefix appends to keys the prefixes that follow one of bytes bytes and hash
// chain by message m: one for each page of its content but the last, then m whole.
func extendPrefix(keys []prefixKey, chain uint64, bytes int, m openai.Message) ([]prefixKey, int) {
	h := chained(chain)
	h.Write([]byte(m.Role))
	h.Write([]byte{0})
	bytes += len(m.Role)
	content := m.Content
	for len(content) > cachePageBytes {
		h.Write([]byte(content[:cachePageBytes]))
		bytes += cachePageBytes
		content = content[cachePageBytes:]
		keys = append(keys, prefixKey{hash: h.Sum64(), tokens: bytes / 4})
		h = chained(keys[len(keys)-1].hash)
	}
	for _, s := range []string{content, m.ToolCallID} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	bytes += len(content) + len(m.ToolCallID)
	for _, tc := range m.ToolCalls {
		for _, s := range []string{tc.ID, tc.Function.Name, tc.Function.Arguments} {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		bytes += len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return append(keys, prefixKey{hash: h.Sum64(), tokens: bytes / 4}), bytes
}

// Cache tiers.
const (
	tierDevice = iota
	tierHost
)

// prefixCache is the cache; it is guarded by the scheduler's mutex.
type prefixCache struct {
	off bool
	// device and host are the tiers' capacities in tokens; host is 0 without HiCache.
	device, host int
	entries      map[uint64]*list.Element // of *cacheEntry, in either tier's list
	lru          [2]list.List             // per tier; front: most recently used
	held         [2]int                   // tokens held per tier: the sum of the entries' own tokens
	// hostHits counts the tokens found in the host tier and restored.
	hostHits int64
}

type cacheEntry struct {
	hash uint64
	own  int // tokens this prefix adds to its parent
	tier int
}

// match is how many tokens of a prompt of prompt tokens, with the given prefixes, the
// cache holds, and how many of them were restored from the host tier: the longest run
// of cached prefixes from the shortest. At least one token is always computed, as SGLang
// recomputes a prompt's last token to sample from it. Host entries found move to the
// device tier.
func (c *prefixCache) match(keys []prefixKey, prompt int) (cached, restored int) {
	if c.off {
		return 0, 0
	}
	n := 0
	for i, k := range keys {
		if _, ok := c.entries[k.hash]; !ok {
			break
		}
		n = i + 1
	}
	// Touch the deepest first so that parents stay more recent than their children and
	// eviction takes leaves before the prefixes they hang from.
	for i := n - 1; i >= 0; i-- {
		e := c.entries[keys[i].hash]
		if ent := e.Value.(*cacheEntry); ent.tier == tierHost {
			restored += ent.own
			c.move(e, tierDevice)
		} else {
			c.lru[tierDevice].MoveToFront(e)
		}
	}
	if n == 0 {
		return 0, 0
	}
	cached = min(keys[n-1].tokens, prompt-1)
	restored = min(restored, cached)
	c.hostHits += int64(restored)
	if restored > 0 {
		c.evict()
	}
	return cached, restored
}

// move takes entry e to the front of tier t.
func (c *prefixCache) move(e *list.Element, t int) {
	ent := c.lru[e.Value.(*cacheEntry).tier].Remove(e).(*cacheEntry)
	c.held[ent.tier] -= ent.own
	ent.tier = t
	c.held[t] += ent.own
	c.entries[ent.hash] = c.lru[t].PushFront(ent)
}

// insert caches the prefixes in the device tier, then evicts down to the capacities.
func (c *prefixCache) insert(keys []prefixKey) {
	if c.off {
		return
	}
	if c.entries == nil {
		c.entries = map[uint64]*list.Element{}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		if e, ok := c.entries[k.hash]; ok {
			if e.Value.(*cacheEntry).tier == tierHost {
				c.move(e, tierDevice)
			} else {
				c.lru[tierDevice].MoveToFront(e)
			}
			continue
		}
		own := k.tokens
		if i > 0 {
			own -= keys[i-1].tokens
		}
		c.entries[k.hash] = c.lru[tierDevice].PushFront(&cacheEntry{hash: k.hash, own: own, tier: tierDevice})
		c.held[tierDevice] += own
	}
	c.evict()
}

// evict moves least recently used prefixes of the device tier to the host tier (or
// drops them, without one) until the device tier holds at most its capacity, then drops
// the host tier's until it does.
func (c *prefixCache) evict() {
	for c.held[tierDevice] > max(c.device, 0) && c.lru[tierDevice].Len() > 0 {
		e := c.lru[tierDevice].Back()
		if c.host > 0 {
			c.move(e, tierHost)
			continue
		}
		ent := c.lru[tierDevice].Remove(e).(*cacheEntry)
		delete(c.entries, ent.hash)
		c.held[tierDevice] -= ent.own
	}
	for c.held[tierHost] > max(c.host, 0) && c.lru[tierHost].Len() > 0 {
		ent := c.lru[tierHost].Remove(c.lru[tierHost].Back()).(*cacheEntry)
		delete(c.entries, ent.hash)
		c.held[tierHost] -= ent.own
	}
}
