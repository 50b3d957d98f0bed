package verdict

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/store"
)

// gpuRun is a launch's recorded GPU telemetry: unavailable with why, or ten samples of
// one H100 a second apart, at sm MHz and temp °C rising by one a sample, drawing power W,
// holding mem GiB, the first throttled samples held down by mask (the others idle
// at the last sample only).
type gpuRun struct {
	unavailable string
	sm, temp    int64
	power       float64
	mem         int64
	mask        int64
	throttled   int
}

func recordGPUs(t *testing.T, s *store.Store, exp, run, arm int64, g gpuRun) {
	t.Helper()
	ctx := context.Background()
	if g.unavailable != "" {
		if err := s.SetGPUTelemetry(ctx, store.GPUTelemetry{ExperimentID: exp, RunID: run, ArmID: arm, Status: store.GPUUnavailable,
			Reason: g.unavailable}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := s.SetGPUTelemetry(ctx, store.GPUTelemetry{ExperimentID: exp, RunID: run, ArmID: arm, Status: store.GPUSampled,
		Devices: "0", IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		mask := int64(0)
		switch {
		case k < g.throttled:
			mask = g.mask
		case k == 9:
			mask = 1 // idle as the workload ended: no throttle
		}
		sample := store.GPUSample{ElapsedMS: float64(1000 * k), GPU: 0, UUID: "GPU-5b1e", Name: "NVIDIA H100 80GB HBM3",
			SMClockMHz: sql.NullInt64{Int64: g.sm, Valid: true}, MemClockMHz: sql.NullInt64{Int64: 2619, Valid: true},
			PowerW: sql.NullFloat64{Float64: g.power, Valid: true}, TempC: sql.NullInt64{Int64: g.temp + int64(k), Valid: true},
			ThrottleMask: sql.NullInt64{Int64: mask, Valid: true}, MemUsedBytes: sql.NullInt64{Int64: g.mem << 30, Valid: true},
			UtilPct: sql.NullInt64{Int64: 97, Valid: true}}
		if err := s.AddGPUSamples(ctx, exp, run, arm, []store.GPUSample{sample}); err != nil {
			t.Fatal(err)
		}
	}
}

// gpuExample is the decisive A/B with four launches per arm on H100s: treatment's
// block-2 launch ran hot with its clocks held down by heat, block 1 reached its power cap
// now and then, and one control launch's GPUs could not be read.
func gpuExample() fixture {
	f := examples["quickstart4"]
	f.runs = append([]launch{}, f.runs...)
	cool := &gpuRun{sm: 1980, temp: 52, power: 540, mem: 71}
	gpus := map[string]*gpuRun{
		"treatment0": cool, "control0": cool, "control1": cool, "control3": cool, "treatment3": cool,
		"treatment1": {sm: 1830, temp: 64, power: 699, mem: 71, mask: 4, throttled: 1},
		"treatment2": {sm: 1410, temp: 84, power: 612, mem: 72, mask: 64 | 4, throttled: 4},
		"control2":   {unavailable: "no sample could be read: NVML GPU 0 power: ERROR_GPU_IS_LOST"},
	}
	for i, r := range f.runs {
		f.runs[i].gpu = gpus[r.arm+string(rune('0'+r.block))]
	}
	return f
}

// TestGPUTelemetryInTheVerdict: the launches' GPUs appear in the folded Conditions beside
// their rates and speeds, a launch held down by heat is named in the caveats, the first
// screen is the one the same experiment has without telemetry, and --json carries each
// launch's telemetry.
func TestGPUTelemetryInTheVerdict(t *testing.T) {
	db, ref := recordFixture(t, gpuExample())
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	md := markdown(t, v)
	checkGolden(t, []byte(md), filepath.Join("testdata", "gpu.golden.md"))
	checkStructure(t, md)
	if first := firstScreenOf(md); first != firstScreenOf(markdown(t, buildExample(t, "quickstart4"))) {
		t.Errorf("GPU telemetry changed the first screen:\n%s", first)
	}
	conditions := sectionOf(md, "Conditions")
	for _, want := range []string{
		"| treatment/b2 | 11/60 | 313 | ",
		"| 0 (NVIDIA H100 80GB HBM3) | 10 | 1410 MHz | 2619 MHz | 93 °C | 612 W | 72.0 GiB | **sw_power_cap 40%, hw_thermal_slowdown 40%** |",
		"| sw_power_cap 10% |",
		"| control/b2 | 0/60 | 313 | – | ",
		"not available: no sample could be read: NVML GPU 0 power: ERROR_GPU_IS_LOST |",
	} {
		if !strings.Contains(conditions, want) {
			t.Errorf("the Conditions section lacks %q:\n%s", want, conditions)
		}
	}
	if c := sectionOf(md, "Caveats"); !strings.Contains(c, "GPU clocks were held down by heat or by the board in treatment/b2 (hw_thermal_slowdown 40% of its GPU samples): its rates") ||
		strings.Contains(c, "treatment/b1") {
		t.Errorf("the caveats do not name the launch held down by heat, and it alone:\n%s", c)
	}

	var sum struct {
		Runs []struct {
			Arm   string                     `json:"arm"`
			Block int                        `json:"block"`
			GPU   map[string]json.RawMessage `json:"gpu_telemetry"`
		} `json:"runs"`
	}
	b, err := json.Marshal(v.Summary())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range sum.Runs {
		switch {
		case r.Arm == "treatment" && r.Block == 2:
			seen++
			if string(r.GPU["temp_c_max"]) != "93" || string(r.GPU["sm_clock_mhz_median"]) != "1410" ||
				!bytes.Equal(r.GPU["throttled"], []byte(`{"hw_thermal_slowdown":0.4,"sw_power_cap":0.4}`)) {
				t.Errorf("treatment b2's telemetry in --json: %s", b)
			}
		case r.Arm == "control" && r.Block == 2:
			seen++
			if string(r.GPU["status"]) != `"unavailable"` || !strings.Contains(string(r.GPU["reason"]), "ERROR_GPU_IS_LOST") {
				t.Errorf("control b2's telemetry in --json: %s", r.GPU)
			}
		}
	}
	if seen != 2 {
		t.Errorf("--json runs lack telemetry: %s", b)
	}
}

// TestGPUTelemetryUnavailableIsOneLine: an experiment whose launches had no GPU to read
// (a host without the driver) says so in one line of its Conditions, no table.
func TestGPUTelemetryUnavailableIsOneLine(t *testing.T) {
	f := examples["quickstart"]
	f.runs = append([]launch{}, f.runs...)
	for i := range f.runs {
		f.runs[i].gpu = &gpuRun{unavailable: "libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"}
	}
	db, ref := recordFixture(t, f)
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	md := markdown(t, v)
	checkStructure(t, md)
	without := markdown(t, buildExample(t, "quickstart"))
	want := "GPU telemetry: not available (libnvidia-ml.so.1 not found (no NVIDIA driver on this host)).\n"
	if got := sectionOf(md, "Conditions"); got != sectionOf(without, "Conditions")+want+"\n" {
		t.Errorf("Conditions with every launch's telemetry unavailable:\n%s\nwant the section without telemetry and the line %q", got, want)
	}
	if md != strings.Replace(without, sectionOf(without, "Conditions"), sectionOf(md, "Conditions"), 1) {
		t.Errorf("telemetry unavailable changed more than the Conditions section")
	}
}

// firstScreenOf is a verdict up to its first folded section.
func firstScreenOf(md string) string {
	first, _, _ := strings.Cut(md, "<details>")
	return first
}

// sectionOf is the body of a folded section, from its summary to its end.
func sectionOf(md, title string) string {
	_, rest, ok := strings.Cut(md, "<details><summary>"+title)
	if !ok {
		return ""
	}
	_, rest, _ = strings.Cut(rest, "</summary>\n")
	body, _, _ := strings.Cut(rest, "</details>")
	return body
}
