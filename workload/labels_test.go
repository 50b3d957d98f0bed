package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// Every chat request tells the engine its launch's labels and its own session and round,
// one JSON object of strings in the header the client is given, for every workload kind;
// without a header name, none is sent.
func TestRequestsCarryTheirLabels(t *testing.T) {
	for _, kind := range []string{"toolcall-agent", "long-context"} {
		t.Run(kind, func(t *testing.T) {
			e := newScriptedEngine(t)
			var mu sync.Mutex
			var seen []map[string]string
			e.hook = func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool {
				var labels map[string]string
				if err := json.Unmarshal([]byte(r.Header.Get("x-custom-labels")), &labels); err != nil {
					t.Errorf("request %s: labels %q: %v", req.RID, r.Header.Get("x-custom-labels"), err)
				}
				mu.Lock()
				seen = append(seen, labels)
				mu.Unlock()
				return false
			}
			cfg := Config{Kind: kind, Sessions: 3, Rounds: 2, Concurrency: 3, Seed: 5, MaxTokens: 16, SessionOffset: 6,
				Labels: map[string]string{"experiment": "4", "arm": "treatment", "block": "2"}, LabelsHeader: "x-custom-labels"}
			if kind == "long-context" {
				cfg.LongContext = &LongContextConfig{StartTokens: 200, CeilingTokens: 400}
			}
			if err := Run(context.Background(), cfg, e.srv.URL, &memRecorder{}); err != nil {
				t.Fatal(err)
			}
			mu.Lock() // a handler may still be returning
			got := slices.Clone(seen)
			mu.Unlock()
			if len(got) == 0 {
				t.Fatal("no request reached the engine")
			}
			var sessions []string
			for _, l := range got {
				if l["experiment"] != "4" || l["arm"] != "treatment" || l["block"] != "2" || l["session"] == "" || l["round"] == "" || len(l) != 5 {
					t.Errorf("labels %v", l)
				}
				if !slices.Contains(sessions, l["session"]) {
					sessions = append(sessions, l["session"])
				}
			}
			{
				// Sessions 6 to 8 (block 2 of 3 sessions), each in rounds 0 and 1.
				slices.Sort(sessions)
				if fmt.Sprint(sessions) != "[6 7 8]" {
					t.Errorf("sessions labelled %v, want [6 7 8]", sessions)
				}
				rounds := map[string]bool{}
				for _, l := range got {
					rounds[l["round"]] = true
				}
				if !rounds["0"] || !rounds["1"] || len(rounds) != 2 {
					t.Errorf("rounds labelled %v, want 0 and 1", rounds)
				}
			}
		})
	}
	// No header name, no header.
	e := newScriptedEngine(t)
	e.hook = func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool {
		if h := r.Header.Get("x-custom-labels") + r.Header.Get("X-Arbiter-Labels"); h != "" {
			t.Errorf("a client without a labels header sent %q", h)
		}
		return false
	}
	if err := Run(context.Background(), Config{Sessions: 1, Rounds: 1, Seed: 5, Labels: map[string]string{"arm": "a"}}, e.srv.URL, &memRecorder{}); err != nil {
		t.Fatal(err)
	}
}

// FuzzLabelHeaderIsTheMapsJSON: the header text is json.Marshal of the launch's labels
// with the request's session and round put in, whatever the names and values.
func FuzzLabelHeaderIsTheMapsJSON(f *testing.F) {
	f.Add("arm", "treatment", "block", "0", 3, 1, true)
	f.Add("session", "<&>", "rounds", "é\u2028", 0, 0, true)
	f.Add("round", "x", "", "", 7, 2, false)
	f.Add("", "", "", "", 1, 1, false)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, session, round int, tagged bool) {
		labels := map[string]string{}
		if k1 != "" {
			labels[k1] = v1
		}
		if k2 != "" {
			labels[k2] = v2
		}
		c := &Client{Labels: labels, LabelsHeader: "X-Labels"}
		ctx := context.Background()
		want := maps.Clone(labels)
		if tagged {
			ctx = withRequestTag(ctx, session, round)
			want["session"], want["round"] = strconv.Itoa(session), strconv.Itoa(round)
		}
		base := http.Header{"Accept": {"text/event-stream"}}
		h := c.labelHeader(ctx, base)
		if len(want) == 0 {
			if h.Get("X-Labels") != "" {
				t.Fatalf("header %q for no labels", h.Get("X-Labels"))
			}
			return
		}
		b, _ := json.Marshal(want)
		if got := h.Get("X-Labels"); got != string(b) {
			t.Fatalf("header %s, want %s", got, b)
		}
		if base.Get("X-Labels") != "" {
			t.Fatal("the shared header was changed")
		}
	})
}
