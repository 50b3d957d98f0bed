package main

import (
	"container/list"
	"hash/fnv"

	"github.com/arbiterlab/arbiter/openai"
)

// The prefix cache stands in for SGLang's radix cache: a prompt whose beginning was
// prefilled before (the same tools and the same first messages, as every turn of a
// conversation resends, or a system prompt that sessions share) prefills only the rest.
// It matches whole messages rather than tokens: a prefix is the tools plus the first k
// messages, named by a chained hash, and its length in tokens is counted as promptTokens
// counts (four bytes a token). A finished reply is cached with the prompt it answered,
// so the next turn, which resends it, finds it. Entries are evicted least recently used
// first once they hold more tokens than the KV cache has left beside the running
// requests; with HiCache the host pool (--hicache-ratio times the device pool) holds
// evicted prefixes too, and a hit there costs nothing extra (refserve models no restore
// time). Only timing reads the cache: no fault depends on it.

// prefixKey is one prefix of a prompt: its chained hash and its length in tokens.
type prefixKey struct {
	hash   uint64
	tokens int
}

// promptPrefixes lists the prefixes of a request's prompt, shortest first: the tools,
// then each message added in turn, and the bytes promptTokens counts of the whole. The
// last prefix is the whole prompt less the token promptTokens adds.
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
		var k prefixKey
		k, bytes = extendPrefix(chain, bytes, m)
		chain = k.hash
		keys = append(keys, k)
	}
	return keys, bytes
}

// extendPrefix is the prefix that follows one of bytes bytes and hash chain by message m.
func extendPrefix(chain uint64, bytes int, m openai.Message) (prefixKey, int) {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(chain >> (8 * i))
	}
	h.Write(b[:])
	for _, s := range []string{m.Role, m.Content, m.ToolCallID} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	bytes += len(m.Role) + len(m.Content) + len(m.ToolCallID)
	for _, tc := range m.ToolCalls {
		for _, s := range []string{tc.ID, tc.Function.Name, tc.Function.Arguments} {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		bytes += len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return prefixKey{hash: h.Sum64(), tokens: bytes / 4}, bytes
}

// prefixCache is the cache; it is guarded by the scheduler's mutex.
type prefixCache struct {
	off     bool
	entries map[uint64]*list.Element // of *cacheEntry
	lru     list.List                // front: most recently used
	held    int                      // tokens held: the sum of the entries' own tokens
}

type cacheEntry struct {
	hash uint64
	own  int // tokens this prefix adds to its parent
}

// match is how many tokens of a prompt of prompt tokens, with the given prefixes, the
// cache holds: the longest run of cached prefixes from the shortest. At least one token
// is always computed, as SGLang recomputes a prompt's last token to sample from it.
func (c *prefixCache) match(keys []prefixKey, prompt int) int {
	if c.off {
		return 0
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
		c.lru.MoveToFront(c.entries[keys[i].hash])
	}
	if n == 0 {
		return 0
	}
	return min(keys[n-1].tokens, prompt-1)
}

// insert caches the prefixes, then evicts down to capacity tokens.
func (c *prefixCache) insert(keys []prefixKey, capacity int) {
	if c.off {
		return
	}
	if c.entries == nil {
		c.entries = map[uint64]*list.Element{}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		if e, ok := c.entries[k.hash]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		own := k.tokens
		if i > 0 {
			own -= keys[i-1].tokens
		}
		c.entries[k.hash] = c.lru.PushFront(&cacheEntry{hash: k.hash, own: own})
		c.held += own
	}
	c.evict(capacity)
}

// evict drops least recently used prefixes until the cache holds at most capacity tokens.
func (c *prefixCache) evict(capacity int) {
	for c.held > max(capacity, 0) && c.lru.Len() > 0 {
		e := c.lru.Back()
		ent := c.lru.Remove(e).(*cacheEntry)
		delete(c.entries, ent.hash)
		c.held -= ent.own
	}
}
