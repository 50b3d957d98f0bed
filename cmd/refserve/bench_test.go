package main

import (
	"context"
	"testing"
)

// BenchmarkDecodeIteration is the CPU cost of one scheduler iteration at the field's
// load: 60 running requests through the sim backend and the reply state machine.
func BenchmarkDecodeIteration(b *testing.B) {
	be, _ := newSimBackend(BackendConfig{BF16IndexK: true, HiCache: true, Seed: 1})
	tools := testTools()
	gens := make([]*generation, 60)
	steps := make([]Step, 60)
	reset := func(i int) {
		req := userRequest("Session "+string(rune('A'+i))+": weather in Lima?", tools)
		rep, session, err := agent{seed: 1}.next(&req)
		if err != nil {
			b.Fatal(err)
		}
		gens[i] = newGeneration("deepseekv4", rep, 0, 1, session)
		steps[i] = Step{Session: session, Position: 200, InFlight: 60, Load: 60, Restored: true}
	}
	for i := range gens {
		reset(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := be.Decode(context.Background(), steps); err != nil {
			b.Fatal(err)
		}
		for i, g := range gens {
			if _, finish := g.step(steps[i].Stale, steps[i].Position); finish != "" {
				reset(i)
				continue
			}
			steps[i].Position++
		}
	}
}
