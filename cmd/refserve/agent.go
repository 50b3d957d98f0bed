package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/arbiterlab/arbiter/openai"
)

// The scripted agent is refserve's "model": given the seed and the conversation it
// decides, deterministically, whether to call a tool (and with which arguments) or to
// answer in plain text. For each user message it plans one or two of the offered tools,
// calls them one per assistant turn, and answers once their results are in.

// toolChoice is a request's parsed tool_choice.
type toolChoice struct {
	mode  string // "auto", "none", "required" or "function"
	force string // the function name when mode is "function"
}

// parseToolChoice reads tool_choice: absent means auto.
func parseToolChoice(raw json.RawMessage) (toolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "auto", "none", "required":
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, fmt.Errorf("tool_choice: %q is not auto, none or required", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return toolChoice{}, fmt.Errorf("tool_choice: %w", err)
	}
	if obj.Function.Name == "" {
		return toolChoice{}, errors.New(`tool_choice: an object must name {"type":"function","function":{"name":...}}`)
	}
	return toolChoice{mode: "function", force: obj.Function.Name}, nil
}

// call is one tool call the agent makes.
type call struct {
	ID     string
	Name   string
	Params []param // in the order of the tool's schema
}

// param is one argument of a call.
type param struct {
	Name  string
	Value any // string, int64, float64, bool, []any or []param (an object)
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
	choice, err := parseToolChoice(req.ToolChoice)
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
	if choice.mode == "function" && findTool(tools, choice.force) < 0 {
		return reply{}, 0, fmt.Errorf("tool_choice names %q, which is not among the offered tools", choice.force)
	}
	if (choice.mode == "required" || choice.mode == "function") && len(tools) == 0 {
		return reply{}, 0, fmt.Errorf("tool_choice %q needs tools", choice.mode)
	}
	planKey := mix64(a.seed ^ hashString(conv.userText))
	var plan []int
	switch {
	case len(tools) == 0 || choice.mode == "none":
	case choice.mode == "function":
		plan = []int{findTool(tools, choice.force)}
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
			Params: argumentsFor(t.Function.Parameters, newRNG(key), conv.userText),
		}
	}
	var r reply
	switch {
	case len(plan) > 0 && (done < len(plan) || choice.mode == "required" || choice.mode == "function"):
		c := makeCall(done)
		r.Call, r.Lure = &c, c
	default:
		r.Text = answerText(planKey, conv)
		if len(tools) > 0 {
			k := int(planKey % uint64(len(tools)))
			t := tools[k]
			r.Lure = call{Name: t.Function.Name, Params: argumentsFor(t.Function.Parameters, newRNG(planKey), conv.userText)}
		} else {
			r.Lure = call{Name: "search", Params: []param{{Name: "query", Value: topicOf(conv.userText, planKey)}}}
		}
	}
	return r, conv.session, nil
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

// schema is the part of a JSON schema the agent honours.
type schema struct {
	Type       json.RawMessage   `json:"type"`
	Enum       []any             `json:"enum"`
	Properties json.RawMessage   `json:"properties"`
	Required   []string          `json:"required"`
	Items      json.RawMessage   `json:"items"`
	Minimum    *float64          `json:"minimum"`
	Maximum    *float64          `json:"maximum"`
	MinItems   *int              `json:"minItems"`
	MaxItems   *int              `json:"maxItems"`
	AnyOf      []json.RawMessage `json:"anyOf"`
	OneOf      []json.RawMessage `json:"oneOf"`
	Format     string            `json:"format"`
}

// argumentsFor builds arguments that satisfy a tool's parameter schema: every required
// property with the right type, some optional ones. A schema it cannot read gives {}.
func argumentsFor(raw json.RawMessage, rng *rng, userText string) []param {
	a := &argWriter{rng: rng, userText: userText, budget: argBudget}
	v := a.value(raw, "", 0)
	if ps, ok := v.([]param); ok {
		return ps
	}
	return []param{}
}

// argBudget bounds the values one call's arguments hold, so that a schema of nested
// arrays of objects cannot blow up; past it, nested containers come out empty.
const argBudget = 256

// argWriter fills in arguments from a schema.
type argWriter struct {
	rng      *rng
	userText string
	budget   int
}

func (a *argWriter) value(raw json.RawMessage, name string, depth int) any {
	rng, userText := a.rng, a.userText
	a.budget--
	var s schema
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &s) != nil {
		return []param{}
	}
	if len(s.Enum) > 0 {
		switch e := s.Enum[rng.intn(len(s.Enum))].(type) {
		case float64:
			if e == float64(int64(e)) {
				return int64(e)
			}
			return e
		case string, bool:
			return e
		}
	}
	if alt := append(s.AnyOf, s.OneOf...); len(alt) > 0 && len(s.Type) == 0 {
		return a.value(alt[0], name, depth)
	}
	typ := schemaType(s.Type)
	if typ == "" {
		switch {
		case len(s.Properties) > 0:
			typ = "object"
		case len(s.Items) > 0:
			typ = "array"
		default:
			typ = "string"
		}
	}
	switch typ {
	case "object":
		if depth > 4 || (a.budget <= 0 && depth > 0) {
			return []param{}
		}
		var ps []param
		required := map[string]bool{}
		for _, r := range s.Required {
			required[r] = true
		}
		for _, p := range orderedProperties(s.Properties) {
			if required[p.name] || (a.budget > 0 && rng.intn(2) == 0) {
				ps = append(ps, param{Name: p.name, Value: a.value(p.schema, p.name, depth+1)})
				delete(required, p.name)
			}
		}
		for _, r := range s.Required { // required but not described: a string will do
			if required[r] {
				ps = append(ps, param{Name: r, Value: stringFor(r, "", rng, userText)})
				delete(required, r)
			}
		}
		if ps == nil {
			ps = []param{}
		}
		return ps
	case "array":
		lo, hi := 1, 2
		if s.MinItems != nil && *s.MinItems > lo {
			lo = min(*s.MinItems, 8)
		}
		if s.MaxItems != nil && *s.MaxItems < hi {
			hi = max(*s.MaxItems, 0)
		}
		if hi < lo {
			hi = lo
		}
		n := lo + rng.intn(hi-lo+1)
		if a.budget <= 0 {
			n = 0
		}
		items := make([]any, 0, n)
		for range n {
			if depth > 4 {
				items = append(items, stringFor(name, "", rng, userText))
				continue
			}
			items = append(items, a.value(s.Items, name, depth+1))
		}
		return items
	case "integer":
		lo, hi := 1.0, 10.0
		if s.Minimum != nil {
			lo = math.Ceil(*s.Minimum)
			if s.Maximum == nil {
				hi = lo + 9
			}
		}
		if s.Maximum != nil {
			hi = math.Floor(*s.Maximum)
			if s.Minimum == nil {
				lo = min(lo, hi)
			}
		}
		if hi < lo || hi-lo > 1e15 {
			return int64(lo)
		}
		return int64(lo) + int64(rng.intn(int(hi-lo)+1))
	case "number":
		lo, hi := 0.5, 100.0
		if s.Minimum != nil {
			lo = *s.Minimum
			if s.Maximum == nil {
				hi = lo + 100
			}
		}
		if s.Maximum != nil {
			hi = *s.Maximum
			if s.Minimum == nil {
				lo = min(lo, hi)
			}
		}
		if !(hi >= lo) || hi-lo > 1e15 {
			return lo
		}
		v := lo + (hi-lo)*float64(rng.intn(1001))/1000
		return v
	case "boolean":
		return rng.intn(2) == 1
	case "null":
		return nil
	default:
		return stringFor(name, s.Format, rng, userText)
	}
}

// schemaType reads "type", which may be a string or a list such as ["string", "null"].
func schemaType(raw json.RawMessage) string {
	var t string
	if json.Unmarshal(raw, &t) == nil {
		return t
	}
	var ts []string
	if json.Unmarshal(raw, &ts) == nil {
		for _, t := range ts {
			if t != "null" {
				return t
			}
		}
		if len(ts) > 0 {
			return ts[0]
		}
	}
	return ""
}

// stringFor picks a plausible string for a property from its name and the user's words.
func stringFor(name, format string, rng *rng, userText string) string {
	n := strings.ToLower(name)
	switch {
	case format == "date" || strings.Contains(n, "date"):
		return fmt.Sprintf("2026-%02d-%02d", 1+rng.intn(12), 1+rng.intn(28))
	case format == "email" || strings.Contains(n, "email"):
		return "user@example.com"
	case format == "uri" || strings.Contains(n, "url"):
		return "https://example.com/" + strings.ToLower(topicOf(userText, rng.next()))
	}
	return topicOf(userText, rng.next())
}

type property struct {
	name   string
	schema json.RawMessage
}

// orderedProperties lists a schema's properties in the order they are written, which a
// map would lose.
func orderedProperties(raw json.RawMessage) []property {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []property
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, property{name: k, schema: v})
		}
	}
	return out
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
