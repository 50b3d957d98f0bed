package stats

import (
	"math"
	"testing"
)

func TestLossesBoundsByDefinition(t *testing.T) {
	a := ArmOutcome{Completed: 55, Corrupted: 0, Crashed: 3, TimedOut: 2}
	b := ArmOutcome{Completed: 50, Corrupted: 7, TimedOut: 6, Errored: 4}
	res, err := Losses(a, b, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	// Lo: A's 5 lost corrupted, B's 10 lost clean; Hi: the reverse.
	wantLo := 7.0/60 - 5.0/60
	wantHi := 17.0/60 - 0.0/60
	if math.Abs(res.Bounds.Lo-wantLo) > 1e-15 || math.Abs(res.Bounds.Hi-wantHi) > 1e-15 {
		t.Errorf("bounds %+v, want [%.4f, %.4f]", res.Bounds, wantLo, wantHi)
	}
	if res.LoP != FisherExact(5, 60, 7, 60).PTwoSided || res.HiP != FisherExact(0, 60, 17, 60).PTwoSided || res.LossP != FisherExact(5, 60, 10, 60).PTwoSided {
		t.Errorf("p-values %+v do not match the imputed tables", res)
	}
	if math.Abs(res.Observed-(7.0/50)) > 1e-15 || res.ObservedP != FisherExact(0, 55, 7, 50).PTwoSided {
		t.Errorf("observed %+v", res)
	}
	if !res.Straddles || !hasWarning(res.Warnings, "depends on the 15 lost sessions") {
		t.Errorf("with 15 lost sessions the decision should straddle: %+v", res)
	}
	if hasWarning(res.Warnings, "loss rates differ") {
		t.Errorf("5/60 vs 10/60 lost is not a significant difference: %v", res.Warnings)
	}
}

func TestLossesUnequalAndRobust(t *testing.T) {
	// The treatment wedges: 20 of 60 sessions time out against none in control.
	a := ArmOutcome{Completed: 60}
	b := ArmOutcome{Completed: 40, Corrupted: 9, TimedOut: 20}
	res, err := Losses(a, b, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if !hasWarning(res.Warnings, "loss rates differ") || res.LossP > 1e-5 {
		t.Errorf("0/60 vs 20/60 lost should be flagged: p %.3g, %v", res.LossP, res.Warnings)
	}
	// Even with every lost session clean, 9/60 vs 0/60 stays significant: no straddle.
	if res.Straddles {
		t.Errorf("decision should not depend on the lost sessions: %+v", res)
	}
	if _, err := Losses(ArmOutcome{}, b, 0.05); err == nil {
		t.Error("an arm without sessions accepted")
	}
	if _, err := Losses(ArmOutcome{Completed: 3, Corrupted: 4}, b, 0.05); err == nil {
		t.Error("more corrupted than completed accepted")
	}
}

func FuzzLosses(f *testing.F) {
	f.Add(uint8(55), uint8(0), uint8(5), uint8(50), uint8(7), uint8(10))
	f.Add(uint8(0), uint8(0), uint8(1), uint8(1), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, ca, xa, la, cb, xb, lb uint8) {
		a := ArmOutcome{Completed: int(ca), Corrupted: int(xa), Crashed: int(la)}
		b := ArmOutcome{Completed: int(cb), Corrupted: int(xb), Errored: int(lb)}
		res, err := Losses(a, b, 0.05)
		if err != nil {
			return
		}
		if res.Bounds.Lo > res.Bounds.Hi+1e-15 {
			t.Fatalf("bounds reversed: %+v", res.Bounds)
		}
		for _, p := range []float64{res.LossP, res.ObservedP, res.LoP, res.HiP} {
			if !(p >= 0 && p <= 1) {
				t.Fatalf("p-value %v out of [0, 1]: %+v", p, res)
			}
		}
	})
}
