package orchestrator

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// A set of tools is encoded once, whichever sessions offer it, and what is stored is
// always what encoding the turn's own tools gives: after the tools change, even in
// place, the new ones are.
func TestToolsJSONIsTheTurnsOwn(t *testing.T) {
	t.Parallel()
	tools := []openai.Tool{
		{Type: "function", Function: openai.FunctionSpec{Name: "lookup", Description: "find a ticket", Parameters: json.RawMessage(`{"type":"object"}`)}},
		{Type: "function", Function: openai.FunctionSpec{Name: "close", Parameters: json.RawMessage(`{"type": "object", "required": ["id"]}`)}},
	}
	want := func() string {
		b, err := json.Marshal(tools)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tr := &sessionTracker{}
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Go(func() {
			for range 3 {
				if got := tr.toolsJSON(tools); got != want() {
					t.Errorf("session %d: %s, want %s", s, got, want())
				}
			}
		})
	}
	wg.Wait()
	tools[1].Function.Parameters[len(`{"type": "`)] = 'O'
	if got := tr.toolsJSON(tools); got != want() {
		t.Errorf("after a schema changed in place: %s, want %s", got, want())
	}
	tools[0].Function.Description = "find a ticket by id"
	if got := tr.toolsJSON(tools); got != want() {
		t.Errorf("after a description changed: %s, want %s", got, want())
	}
	tools = tools[:1]
	if got := tr.toolsJSON(tools); got != want() {
		t.Errorf("after a tool was dropped: %s, want %s", got, want())
	}
}
