package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
)

// The scripted agent is refserve's "model": given the seed and the conversation it
// decides, deterministically, whether to call a tool (and with which arguments) or to
// answer in plain text. For each user message it plans one or two of the offered tools,
// calls them one per assistant turn, and answers once their results are in.

// call is one tool call the agent makes.
type call struct {
	ID     string
	Name   string
	Params []param // in the order of the tool's schema
}

// param is one argument of a call.
type param struct {
	Name  string
	Value any // string, int64, float64, json.Number, bool, nil, []any or []param (an object)
}

// Arguments is the call's arguments as the JSON text a Python server would print
// (json.dumps spacing), so streamed fragments and the whole string agree byte for byte.
func (c call) Arguments() string {
	var b strings.Builder
	writeObject(&b, c.Params)
	return b.String()
}

func writeObject(b *strings.Builder, ps []param) {
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		writeJSONString(b, p.Name)
		b.WriteString(": ")
		writeValue(b, p.Value)
	}
	b.WriteByte('}')
}

func writeValue(b *strings.Builder, v any) {
	switch v := v.(type) {
	case string:
		writeJSONString(b, v)
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
	case json.Number: // an exact number from the schema (enum, const, multipleOf)
		b.WriteString(string(v))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case []param:
		writeObject(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	default:
		b.WriteString("null")
	}
}

func writeJSONString(b *strings.Builder, s string) {
	enc, _ := json.Marshal(s) // a string always marshals
	b.Write(enc)
}

// reply is what the agent decided to produce for one request.
type reply struct {
	Call *call  // a tool call, or nil for a text answer
	Text string // the answer when Call is nil
	// Lure is the call whose markup a corrupted reply degenerates into: the reply's own
	// call, or the call the agent would have made first.
	Lure call
}

// conversation is what the agent reads from a request.
type conversation struct {
	session   uint64            // hash of the first user message
	lastUser  int               // index of the last user message, -1 if none
	userText  string            // its content
	calls     []string          // ids of the calls made since the last user message
	results   map[string]string // tool_call_id -> result content, since the last user message
	callNames map[string]string // tool_call_id -> function name
}

func readConversation(msgs []openai.Message) conversation {
	c := conversation{lastUser: -1, results: map[string]string{}, callNames: map[string]string{}}
	first := true
	for i, m := range msgs {
		if m.Role == "user" {
			if first {
				c.session = hashString(m.Content)
				first = false
			}
			c.lastUser = i
			c.userText = m.Content
		}
	}
	for _, m := range msgs[c.lastUser+1:] {
		switch m.Role {
		case "assistant":
			for _, tc := range m.ToolCalls {
				c.calls = append(c.calls, tc.ID)
				c.callNames[tc.ID] = tc.Function.Name
			}
		case "tool":
			if _, ok := c.callNames[m.ToolCallID]; ok {
				c.results[m.ToolCallID] = m.Content
			}
		}
	}
	return c
}

// answered counts the calls of this round whose results are in.
func (c conversation) answered() int {
	n := 0
	for _, id := range c.calls {
		if _, ok := c.results[id]; ok {
			n++
		}
	}
	return n
}

// agent is the scripted model.
type agent struct {
	seed uint64
}

// next decides the reply to a request and returns it with the conversation's session
// key. The error is a client error (HTTP 400).
func (a agent) next(req *openai.ChatRequest) (reply, uint64, error) {
	choice, err := openai.ParseToolChoice(req.ToolChoice)
	if err != nil {
		return reply{}, 0, err
	}
	conv := readConversation(req.Messages)
	tools := make([]openai.Tool, 0, len(req.Tools))
	for _, t := range req.Tools {
		if t.Function.Name != "" {
			tools = append(tools, t)
		}
	}
	if choice.Mode == openai.ChoiceFunction && findTool(tools, choice.Name) < 0 {
		return reply{}, 0, fmt.Errorf("tool_choice names %q, which is not among the offered tools", choice.Name)
	}
	if (choice.Forces()) && len(tools) == 0 {
		return reply{}, 0, fmt.Errorf("tool_choice %q needs tools", choice.Mode)
	}
	schemas := toolschema.Of(tools)
	if choice.Forces() {
		// A forced call is decoded under a grammar built from the schemas, as SGLang and
		// vLLM do; a schema that cannot be read cannot constrain anything.
		for _, t := range tools {
			if choice.Mode == openai.ChoiceFunction && t.Function.Name != choice.Name {
				continue
			}
			if ts, _ := schemas.Lookup(t.Function.Name); ts.Err != nil {
				return reply{}, 0, fmt.Errorf("tools: %s: %v", t.Function.Name, ts.Err)
			}
		}
	}
	planKey := mix64(a.seed ^ hashString(conv.userText))
	var plan []int
	switch {
	case len(tools) == 0 || choice.Mode == openai.ChoiceNone:
	case choice.Mode == openai.ChoiceFunction:
		plan = []int{findTool(tools, choice.Name)}
	default:
		plan = pickTools(planKey, len(tools))
	}
	done := conv.answered()
	makeCall := func(k int) call {
		t := tools[plan[k%len(plan)]]
		key := mix64(planKey ^ uint64(k+1)*0x2545f4914f6cdd1d)
		return call{
			ID:     fmt.Sprintf("call_%016x%08x", mix64(key^conv.session), uint32(key)),
			Name:   t.Function.Name,
			Params: argumentsFor(lookup(schemas, t.Function.Name), newRNG(key), conv.userText),
		}
	}
	var r reply
	switch {
	case len(plan) > 0 && (done < len(plan) || choice.Forces()):
		c := makeCall(done)
		r.Call, r.Lure = &c, c
	default:
		r.Text = answerText(planKey, conv)
		if len(tools) > 0 {
			k := int(planKey % uint64(len(tools)))
			t := tools[k]
			r.Lure = call{Name: t.Function.Name, Params: argumentsFor(lookup(schemas, t.Function.Name), newRNG(planKey), conv.userText)}
		} else {
			r.Lure = call{Name: "search", Params: []param{{Name: "query", Value: topicOf(conv.userText, planKey)}}}
		}
	}
	return r, conv.session, nil
}

// lookup is the compiled schema of an offered tool (the first of that name).
func lookup(s *toolschema.Set, name string) *toolschema.Tool {
	t, _ := s.Lookup(name)
	return t
}

func findTool(tools []openai.Tool, name string) int {
	for i, t := range tools {
		if t.Function.Name == name {
			return i
		}
	}
	return -1
}

// pickTools plans one or two distinct tools out of n.
func pickTools(key uint64, n int) []int {
	k := 1 + int(key%2)
	if k > n {
		k = n
	}
	first := int(mix64(key^1) % uint64(n))
	plan := []int{first}
	if k == 2 {
		plan = append(plan, (first+1+int(mix64(key^2)%uint64(n-1)))%n)
	}
	return plan
}

// answerText writes the final answer of a round: a few sentences, 30-60 words, that
// mention what the tools returned.
func answerText(key uint64, conv conversation) string {
	rng := newRNG(key ^ 0x5eed)
	var s []string
	if len(conv.results) > 0 {
		for _, id := range conv.calls {
			res, ok := conv.results[id]
			if !ok {
				continue
			}
			s = append(s, fmt.Sprintf("I checked %s and it returned %s.", conv.callNames[id], snippet(res, 8)))
		}
		s = append(s, "Based on these results, here is my answer.")
	} else {
		s = append(s, fmt.Sprintf("You asked about %s.", topicOf(conv.userText, key)))
	}
	fillers := []string{
		"The figures above come straight from the latest data I could reach.",
		"Let me know if you would like more detail on any part of this.",
		"I can run another check later if the situation changes.",
		"Nothing in the results suggests a problem that needs your attention now.",
		"If you plan around this, leave a little margin for surprises.",
		"That is the short version; the longer one adds only minor caveats.",
		"I would treat these numbers as a good guide rather than a guarantee.",
		"Tell me what you decide and I will help with the next step.",
	}
	target := 30 + rng.intn(31)
	words := 0
	for _, x := range s {
		words += len(strings.Fields(x))
	}
	for used := map[int]bool{}; words < target && len(used) < len(fillers); {
		i := rng.intn(len(fillers))
		if used[i] {
			continue
		}
		used[i] = true
		s = append(s, fillers[i])
		words += len(strings.Fields(fillers[i]))
	}
	return strings.Join(s, " ")
}

// snippet is the first n words of a tool result, on one line.
func snippet(s string, n int) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return "nothing"
	}
	if len(f) > n {
		f = append(f[:n:n], "...")
	}
	return strings.Join(f, " ")
}

// maxTopicRunes caps a word the agent repeats from the user's message.
const maxTopicRunes = 24

// topicOf picks a word of the user's message to talk about.
func topicOf(text string, key uint64) string {
	var words []string
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if r := []rune(w); len(r) >= 4 {
			if len(r) > maxTopicRunes { // a word is a word, not a paste of the prompt
				w = string(r[:maxTopicRunes])
			}
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return "that"
	}
	for _, w := range words {
		if unicode.IsUpper([]rune(w)[0]) && w != words[0] {
			return w // a name is the likeliest subject
		}
	}
	return words[int(key%uint64(len(words)))]
}

// rng is a small deterministic generator (splitmix64 stream).
type rng struct{ state uint64 }

func newRNG(seed uint64) *rng { return &rng{state: seed} }

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	return mix64(r.state)
}

// intn is uniform in [0, n); n must be positive.
func (r *rng) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return int(r.next() % uint64(n))
}

// hashString is FNV-1a of s, the key of a session or a plan.
func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
