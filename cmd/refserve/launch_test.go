package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

// launchConfig is refserve's configuration for args with an empty environment.
func launchConfig(t testing.TB, args ...string) config {
	t.Helper()
	c, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("refserve %v: %v", args, err)
	}
	return c
}

func TestLaunchDrawsFollowTheLaunchSeed(t *testing.T) {
	a, b := drawLaunch(7, 0.5, 0.3), drawLaunch(7, 0.5, 0.3)
	if a != b {
		t.Errorf("seed 7 drew %+v, then %+v", a, b)
	}
	if a.FaultMultiplier == 1 || a.SpeedFactor == 1 || !(a.FaultMultiplier > 0) || !(a.SpeedFactor > 0) {
		t.Errorf("seed 7 at CVs 0.5 and 0.3 drew %+v; want two positive draws other than 1", a)
	}
	if c := drawLaunch(8, 0.5, 0.3); c.FaultMultiplier == a.FaultMultiplier || c.SpeedFactor == a.SpeedFactor {
		t.Errorf("seeds 7 and 8 drew %+v and %+v; want other draws", a, c)
	}
	// Each draw has its own stream: M does not move with the speed CV, nor S with the fault CV.
	if m := drawLaunch(7, 0.5, 0).FaultMultiplier; m != a.FaultMultiplier {
		t.Errorf("seed 7: M = %v with --launch-speed-cv 0.3, %v with 0", a.FaultMultiplier, m)
	}
	if s := drawLaunch(7, 0, 0.3).SpeedFactor; s != a.SpeedFactor {
		t.Errorf("seed 7: S = %v with --launch-fault-cv 0.5, %v with 0", a.SpeedFactor, s)
	}
	for seed := range uint64(200) {
		if v := drawLaunch(seed, 0, 0); v.FaultMultiplier != 1 || v.SpeedFactor != 1 || v.faultMultiplier() != 1 || v.speedFactor() != 1 {
			t.Fatalf("seed %d at CV 0 drew %+v; want exactly 1 and 1", seed, v)
		}
		if m := drawLaunch(seed, 0, 1).FaultMultiplier; m != 1 {
			t.Fatalf("seed %d, --launch-fault-cv 0: M = %v; want exactly 1", seed, m)
		}
		if s := drawLaunch(seed, 1, 0).SpeedFactor; s != 1 {
			t.Fatalf("seed %d, --launch-speed-cv 0: S = %v; want exactly 1", seed, s)
		}
	}
	// A CV too small for its gamma's shape to be a finite double still draws a number.
	for _, cv := range []float64{1e-200, 1e-9} {
		if v := drawLaunch(3, cv, cv); !(math.Abs(v.FaultMultiplier-1) < 1e-6) || !(math.Abs(v.SpeedFactor-1) < 1e-6) {
			t.Errorf("CV %g drew %+v; want both within 1e-6 of 1", cv, v)
		}
	}
}

func TestLaunchSeedFromTheCommandLine(t *testing.T) {
	a := launchConfig(t, "--launch-fault-cv", "0.5", "--launch-speed-cv", "0.2", "--launch-seed", "7")
	if b := launchConfig(t, "--launch-fault-cv", "0.5", "--launch-speed-cv", "0.2", "--launch-seed", "7"); a.Launch != b.Launch {
		t.Errorf("--launch-seed 7 parsed twice: %+v, then %+v", a.Launch, b.Launch)
	}
	if want := drawLaunch(7, 0.5, 0.2); a.Launch != want {
		t.Errorf("--launch-seed 7: %+v; want %+v", a.Launch, want)
	}
	// The launch seed is not --seed: the agent's seed changes nothing of the draws.
	if b := launchConfig(t, "--launch-fault-cv", "0.5", "--launch-speed-cv", "0.2", "--launch-seed", "7", "--seed", "99"); b.Launch != a.Launch {
		t.Errorf("--seed 99 changed the launch's draws: %+v; want %+v", b.Launch, a.Launch)
	}
	// Seed 0: every launch draws its own, below 2^53. Two draws of 53 bits collide with
	// probability 2^-53.
	x, y := launchConfig(t, "--launch-fault-cv", "0.5"), launchConfig(t, "--launch-fault-cv", "0.5")
	for _, v := range []launchVariation{x.Launch, y.Launch} {
		if v.Seed == 0 || v.Seed > maxLaunchSeed || v != drawLaunch(v.Seed, 0.5, 0) {
			t.Errorf("--launch-seed 0: drew %+v; want a seed in [1, 2^53) and the draws of that seed", v)
		}
	}
	if x.Launch.Seed == y.Launch.Seed || x.Launch.FaultMultiplier == y.Launch.FaultMultiplier {
		t.Errorf("two launches with --launch-seed 0 drew %+v and %+v; want different seeds and draws", x.Launch, y.Launch)
	}
	// Both CVs 0: nothing drawn, not even a seed.
	if v := launchConfig(t).Launch; v.varies() || v.Seed != 0 || v.faultMultiplier() != 1 || v.speedFactor() != 1 {
		t.Errorf("default launch: %+v; want no variation", v)
	}
}

// TestLaunchDrawsHaveTheirMeanAndCV draws 2,000 launches and compares M's mean and CV,
// and log S's mean and standard deviation, with what the flags ask for. The draws are
// fixed by seeds 1-2000, so the test fails always or never; the tolerances say how far
// a correct sampler's statistics stray at this sample size.
//
// Tolerances are four standard errors (a correct sampler strays further once in 16,000
// sets of seeds):
//   - M's sample mean: SE = C/√n (M has mean 1 and standard deviation C).
//   - M's sample CV, s/m. The sample variance of a distribution with excess kurtosis κ
//     has SE ≈ σ²√((2+κ)/n), so s has SE ≈ σ√((2+κ)/(4n)) (delta method); a gamma's κ is
//     6/shape = 6C². The sample mean moves s/m by at most C·(C/√n) more. Their sum bounds
//     the CV's SE whatever the correlation of s and m.
//   - log S is N(0, C²): its mean has SE C/√n, its standard deviation C/√(2n).
//
// A sampler of mean 1 and CV √C (shape 1/C, a likely slip) gives a CV of 0.71 at C = 0.5:
// thirteen standard errors away, three times the tolerance.
func TestLaunchDrawsHaveTheirMeanAndCV(t *testing.T) {
	const n = 2000
	for _, cv := range []float64{0.5, 1, 2} {
		ms, logS := make([]float64, n), make([]float64, n)
		for i := range n {
			v := drawLaunch(uint64(i+1), cv, cv)
			ms[i], logS[i] = v.FaultMultiplier, math.Log(v.SpeedFactor)
		}
		m, s := meanSD(ms)
		seMean := cv / math.Sqrt(n)
		seCV := cv*math.Sqrt((2+6*cv*cv)/(4*n)) + cv*seMean
		if math.Abs(m-1) > 4*seMean {
			t.Errorf("CV %g: M's mean over %d launches %.4f; want 1 ± %.4f", cv, n, m, 4*seMean)
		}
		if got := s / m; math.Abs(got-cv) > 4*seCV {
			t.Errorf("CV %g: M's CV over %d launches %.4f; want %g ± %.4f", cv, n, got, cv, 4*seCV)
		}
		lm, ls := meanSD(logS)
		if math.Abs(lm) > 4*seMean {
			t.Errorf("CV %g: mean log S over %d launches %.4f; want 0 ± %.4f", cv, n, lm, 4*seMean)
		}
		if se := cv / math.Sqrt(2*n); math.Abs(ls-cv) > 4*se {
			t.Errorf("CV %g: SD of log S over %d launches %.4f; want %g ± %.4f", cv, n, ls, cv, 4*se)
		}
		t.Logf("CV %g: M mean %.4f CV %.4f (± %.4f); log S mean %.4f SD %.4f", cv, m, s/m, 4*seCV, lm, ls)
	}
}

// meanSD is the sample mean and the sample standard deviation (n-1) of xs.
func meanSD(xs []float64) (float64, float64) {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	m := sum / float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

func TestSimHazardScalesWithTheLaunch(t *testing.T) {
	armed := BackendConfig{BF16IndexK: true, HiCache: true, Seed: 3}
	hazard := func(m float64) func(int) float64 {
		cfg := armed
		cfg.FaultMultiplier = m
		b, err := newSimBackend(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b.(*simBackend).hazard
	}
	unset, one, two, half := hazard(0), hazard(1), hazard(2), hazard(0.5)
	for n := range 4097 {
		h := simHazard(n)
		if unset(n) != h || one(n) != h {
			t.Fatalf("%d sessions: hazard %v with no multiplier, %v with M = 1; want simHazard's %v exactly", n, unset(n), one(n), h)
		}
		if want := math.Min(1, 2*h); two(n) != want {
			t.Fatalf("%d sessions: hazard %v at M = 2; want %v (twice %v, capped at 1)", n, two(n), want, h)
		}
		if want := h / 2; half(n) != want {
			t.Fatalf("%d sessions: hazard %v at M = 0.5; want %v", n, half(n), want)
		}
	}
	if two(60) != 2*simHazard64 || one(1024) >= 1 || two(1024) != 1 {
		t.Errorf("M = 2: hazard %v at 60 sessions (want %v), %v at 1024 (want 1, from %v)", two(60), 2*simHazard64, two(1024), one(1024))
	}

	// The draws stay those of (seed, session, position): twice the hazard corrupts about
	// twice the steps, among them every step that M = 1 corrupts.
	doubled := armed
	doubled.FaultMultiplier = 2
	base, more := staleSet(t, armed, 60), staleSet(t, doubled, 60)
	for k := range base {
		if !more[k] {
			t.Fatalf("step %v is stale at M = 1 and not at M = 2", k)
		}
	}
	// 50000 steps at hazard 2h: binomial; five standard deviations.
	n, h := 50000.0, 2*simHazard(60)
	if d := math.Abs(float64(len(more)) - n*h); d > 5*math.Sqrt(n*h*(1-h)) {
		t.Errorf("M = 2: %d stale steps at 60 sessions (%d at M = 1); want about %.0f", len(more), len(base), n*h)
	}
}

func TestPacingScalesWithTheLaunch(t *testing.T) {
	base := launchConfig(t, "--inter-token-delay", "2ms")
	cfg := launchConfig(t, "--inter-token-delay", "2ms", "--launch-speed-cv", "0.5", "--launch-seed", "7")
	s := cfg.Launch.SpeedFactor
	if s == 1 || cfg.Launch.speedFactor() != s {
		t.Fatalf("--launch-speed-cv 0.5 --launch-seed 7: S = %v; want a draw other than 1", s)
	}
	// Durations are whole nanoseconds: each side truncates once, and the unscaled model's
	// truncation (under 1 ns) is multiplied by S. A model left unscaled is off by
	// milliseconds.
	slack := time.Duration(math.Ceil(s)) + 1
	for _, n := range []int{1, 8, 64} {
		got, want := cfg.costModel().decode(n), time.Duration(float64(base.costModel().decode(n))*s)
		if absDur(got-want) > slack {
			t.Errorf("S = %v: decode step of %d takes %s; want %s", s, n, got, want)
		}
	}
	for _, c := range [][2]int{{0, 2000}, {80000, 2000}, {0, 8192}} {
		got, want := cfg.costModel().prefill(c[0], c[1]), time.Duration(float64(base.costModel().prefill(c[0], c[1]))*s)
		if absDur(got-want) > slack {
			t.Errorf("S = %v: prefill of %d tokens at %d takes %s; want %s", s, c[1], c[0], got, want)
		}
	}
	// The scheduler paces by that model.
	if got := cfg.schedulerConfig().cost; got != cfg.costModel() {
		t.Errorf("the scheduler's cost model %+v; want the launch's %+v", got, cfg.costModel())
	}
	// Without a speed CV the pace is today's exactly, whatever the fault CV.
	if c := launchConfig(t, "--inter-token-delay", "2ms", "--launch-fault-cv", "0.5", "--launch-seed", "7"); c.costModel() != base.costModel() {
		t.Errorf("--launch-fault-cv alone changed the pace: %+v; want %+v", c.costModel(), base.costModel())
	}
	unscaled := costModel{interToken: 2 * time.Millisecond, batchCost: defaultDecodeBatchCost, prefillPerToken: defaultPrefillDelayPerToken}
	if base.costModel().speed != 1 || base.costModel().decode(60) != unscaled.decode(60) || base.costModel().prefill(100, 5000) != unscaled.prefill(100, 5000) {
		t.Errorf("default launch: cost model %+v; want %+v at speed 1", base.costModel(), unscaled)
	}
}

func TestBackendGetsTheLaunchMultiplier(t *testing.T) {
	if m := launchConfig(t).backendConfig().FaultMultiplier; m != 1 {
		t.Errorf("default launch: the backend's multiplier is %v; want 1", m)
	}
	if m := launchConfig(t, "--launch-speed-cv", "0.5", "--launch-seed", "7").backendConfig().FaultMultiplier; m != 1 {
		t.Errorf("--launch-speed-cv alone: the backend's multiplier is %v; want 1", m)
	}
	cfg := launchConfig(t, "--launch-fault-cv", "0.5", "--launch-seed", "7")
	if m := cfg.backendConfig().FaultMultiplier; m != cfg.Launch.FaultMultiplier || m == 1 {
		t.Errorf("--launch-fault-cv 0.5: the backend's multiplier is %v; want the draw %v", m, cfg.Launch.FaultMultiplier)
	}
}

func TestServerInfoReportsLaunchVariation(t *testing.T) {
	_, plain := startServer(t, testConfig(t), nil)
	for k := range serverInfo(t, plain) {
		if strings.Contains(k, "launch") {
			t.Errorf("default launch: server info has %s; want no launch variation reported", k)
		}
	}
	cfg := launchConfig(t, "--launch-speed-cv", "0.25", "--launch-seed", "11")
	cfg.InterTokenDelay = 0
	_, base := startServer(t, cfg, nil)
	got, _ := serverInfo(t, base)["launch_variation"].(map[string]any)
	want := map[string]any{"seed": 11.0, "fault_cv": 0.0, "speed_cv": 0.25, "fault_multiplier": 1.0, "speed_factor": cfg.Launch.SpeedFactor}
	if len(got) != len(want) {
		t.Errorf("launch_variation = %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("launch_variation.%s = %#v; want %#v", k, got[k], v)
		}
	}
}

func TestStartupLogsLaunchVariation(t *testing.T) {
	for _, varies := range []bool{false, true} {
		cfg := testConfig(t)
		if varies {
			cfg = launchConfig(t, "--launch-fault-cv", "0.5", "--launch-seed", "7")
		}
		var log bytes.Buffer
		b, _ := newSimBackend(cfg.backendConfig())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // serve logs its settings before it looks at ctx, then shuts down
		if err := newServer(cfg, b, slog.New(slog.NewTextHandler(&log, nil))).serve(ctx, ln); err != nil {
			t.Fatal(err)
		}
		n := strings.Count(log.String(), "launch variation drawn")
		switch {
		case !varies && n != 0:
			t.Errorf("default launch logged its launch variation:\n%s", log.String())
		case varies && (n != 1 || !strings.Contains(log.String(), "launch_seed=7 fault_cv=0.5 fault_multiplier=")):
			t.Errorf("--launch-fault-cv 0.5 --launch-seed 7: want one line with the draws; log:\n%s", log.String())
		}
	}
}

// TestProcessLaunchVariation launches refserve as arbiter does, twice with one launch
// seed and twice without: the first two report the same draws, the last two (arbiter
// passes identical args to every launch of an A/A experiment) differ.
func TestProcessLaunchVariation(t *testing.T) {
	launch := func(args ...string) map[string]any {
		p := startProcess(t, nil, args...)
		v, ok := serverInfo(t, p.url)["launch_variation"].(map[string]any)
		if !ok {
			t.Fatalf("refserve %v: server info has no launch_variation", args)
		}
		return v
	}
	seeded := []string{"--launch-fault-cv", "0.5", "--launch-seed", "7"}
	a, b := launch(seeded...), launch(seeded...)
	want := drawLaunch(7, 0.5, 0)
	for _, v := range []map[string]any{a, b} {
		if v["seed"] != 7.0 || v["fault_cv"] != 0.5 || v["fault_multiplier"] != want.FaultMultiplier ||
			v["speed_cv"] != 0.0 || v["speed_factor"] != 1.0 {
			t.Errorf("refserve %v: launch_variation %v; want %+v", seeded, v, want)
		}
	}
	x, y := launch("--launch-fault-cv", "0.5"), launch("--launch-fault-cv", "0.5")
	if x["seed"] == y["seed"] || x["fault_multiplier"] == y["fault_multiplier"] {
		t.Errorf("two launches without --launch-seed drew %v and %v; want different seeds and draws", x, y)
	}
}
