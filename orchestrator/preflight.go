package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// ErrPreflight is wrapped by the error of a preflight that failed: something an arm
// needs is missing, and nothing was recorded.
var ErrPreflight = errors.New("preflight failed")

// Check is one preflight check and its outcome.
type Check struct {
	// Node is the node (or, for the external runtime, the arm) checked.
	Node string `json:"node"`
	// What is checked, in a few words: "daemon", "image", "gpus", "port 8998", "base_url".
	What string `json:"what"`
	// OK is whether it passed; Detail says what was found or what is wrong.
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Preflight is every check of an experiment, and the pins that could not be checked.
type Preflight struct {
	Checks []Check `json:"checks"`
	// Unverified lists, for arms that already run (runtime kind external), the pins
	// that the engine's /get_server_info could not confirm, and why; the verdict
	// says so.
	Unverified []string `json:"unverified,omitempty"`
}

// Err is nil when every check passed, else an error wrapping ErrPreflight that names
// each failed check.
func (p Preflight) Err() error {
	var bad []string
	for _, c := range p.Checks {
		if !c.OK {
			bad = append(bad, fmt.Sprintf("%s: %s: %s", c.Node, c.What, c.Detail))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w (nothing was recorded):\n  %s", ErrPreflight, strings.Join(bad, "\n  "))
}

// RunPreflight checks, before anything is recorded, that every node can take the
// spec's arms: each Docker daemon answers, holds the engine image and can give
// containers GPUs where slots pin them; the GPUs of the process runtime's slots exist;
// fixed ports in the engine's command line are free, and not bound twice by arms that
// share a node's network; arms that already run (external) answer at their base_url
// and report their pins. `arbiter run` runs it first; `arbiter validate --preflight`
// runs it alone.
func RunPreflight(ctx context.Context, spec *arms.Spec) (Preflight, error) {
	var p Preflight
	armList, err := spec.Expand()
	if err != nil {
		return p, err
	}
	if spec.Runtime.Kind == "external" {
		p.external(ctx, spec, armList)
		return p, nil
	}
	slots, err := spec.Slots()
	if err != nil {
		return p, err
	}
	ports := fixedPorts(spec, armList)
	for _, n := range spec.Nodes() {
		var nodeSlots []arms.Slot
		gpus := false
		for _, s := range slots {
			if s.Node == n.Name {
				nodeSlots = append(nodeSlots, s)
				gpus = gpus || s.GPUs != ""
			}
		}
		gpus = gpus || n.GPUs == "all"
		sharedNet := spec.Runtime.Kind != "docker" || n.Network == "host"
		local := spec.Runtime.Kind != "docker" || (arms.IsLocalHost(n.Host) && os.Getenv("DOCKER_HOST") == "") || strings.HasPrefix(n.Host, "unix://")
		switch spec.Runtime.Kind {
		case "docker":
			p.docker(ctx, spec, n, gpus)
		default:
			p.processGPUs(n.Name, nodeSlots)
		}
		if sharedNet {
			p.ports(n.Name, ports, len(nodeSlots) > 1, local)
		}
	}
	if spec.Runtime.Kind == "" || spec.Runtime.Kind == arms.DefaultRuntime {
		p.engineCommands(armList)
	}
	return p, nil
}

// engineCommands checks that the process runtime finds every arm's engine binary, as
// it will look for it (beside arbiter, then on PATH): a missing one would fail every
// launch of the experiment.
func (p *Preflight) engineCommands(armList []arms.Arm) {
	seen := map[string]bool{}
	for _, a := range armList {
		if len(a.Command) == 0 || seen[a.Command[0]] {
			continue
		}
		seen[a.Command[0]] = true
		path, err := runtime.LookCommand(a.Command[0])
		p.add("local", "engine", err, a.Command[0]+" is "+path)
	}
}

func (p *Preflight) add(node, what string, err error, ok string) {
	if err != nil {
		p.Checks = append(p.Checks, Check{Node: node, What: what, Detail: err.Error()})
		return
	}
	p.Checks = append(p.Checks, Check{Node: node, What: what, OK: true, Detail: ok})
}

func (p *Preflight) docker(ctx context.Context, spec *arms.Spec, n arms.Node, gpus bool) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d := DockerFor(spec, n)
	dc, err := d.Check(ctx, "", false)
	if err != nil {
		p.add(n.Name, "daemon", err, "")
		return // nothing more can be asked of it
	}
	p.add(n.Name, "daemon", nil, "answers: Docker "+dc.Version)
	_, err = d.Check(ctx, spec.Engine.Image, false)
	p.add(n.Name, "image", err, spec.Engine.Image+" is there")
	if gpus {
		_, err = d.Check(ctx, "", true)
		p.add(n.Name, "gpus", err, "the daemon can give containers GPUs (runtimes: "+strings.Join(dc.Runtimes, ", ")+")")
	}
}

// processGPUs checks that the devices of a local node's slots exist.
func (p *Preflight) processGPUs(node string, slots []arms.Slot) {
	var ids []string
	for _, s := range slots {
		if s.GPUs != "" {
			got, _ := runtime.ParseGPUs(s.GPUs)
			ids = append(ids, got...)
		}
	}
	if len(ids) == 0 {
		return
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		// No NVIDIA driver here: the pins are only CUDA_VISIBLE_DEVICES, which an
		// engine on the CPU (refserve's sim backend) ignores; a CUDA engine fails its
		// own start, which the run records.
		p.add(node, "gpus", nil, "no NVIDIA driver on this machine (/dev/nvidiactl): GPUs "+strings.Join(ids, ",")+" are pinned through CUDA_VISIBLE_DEVICES only")
		return
	}
	var missing []string
	for _, id := range ids {
		if _, err := os.Stat("/dev/nvidia" + id); err != nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		p.add(node, "gpus", fmt.Errorf("no device /dev/nvidia%s on this machine (the slots pin GPUs %s)", strings.Join(missing, ", /dev/nvidia"), strings.Join(ids, ",")), "")
		return
	}
	p.add(node, "gpus", nil, "GPUs "+strings.Join(ids, ",")+" are present")
}

// fixedPort is a port that the engine's command line sets itself (a bootstrap or
// metrics port), not the one the runtime picks.
type fixedPort struct {
	flag string
	port int
	arms []string
}

// fixedPorts finds flags named *-port with a port number in the arms' command lines.
func fixedPorts(spec *arms.Spec, armList []arms.Arm) []fixedPort {
	runtimeFlag := arms.PresetFor(spec.Engine.Preset).PortFlag
	var out []fixedPort
	for _, a := range armList {
		for i, tok := range a.Command {
			name, val, inline := strings.Cut(tok, "=")
			if !strings.HasPrefix(name, "--") || !strings.HasSuffix(name, "-port") || name == runtimeFlag {
				continue
			}
			if !inline {
				if i+1 >= len(a.Command) {
					continue
				}
				val = a.Command[i+1]
			}
			port, err := strconv.Atoi(val)
			if err != nil || port <= 0 || port > 65535 {
				continue
			}
			j := slices.IndexFunc(out, func(f fixedPort) bool { return f.flag == name && f.port == port })
			if j < 0 {
				out = append(out, fixedPort{flag: name, port: port})
				j = len(out) - 1
			}
			out[j].arms = append(out[j].arms, a.Name)
		}
	}
	return out
}

// ports checks the fixed ports of a node whose arms share one network: free here when
// the node is this machine, and not set alike for arms that may run side by side.
func (p *Preflight) ports(node string, ports []fixedPort, sideBySide, local bool) {
	for _, f := range ports {
		what := fmt.Sprintf("port %d", f.port)
		if sideBySide && len(f.arms) > 1 {
			p.add(node, what, fmt.Errorf("%s %d is set for arms %s, which may run side by side on this node's one network: give each its own, or one slot", f.flag, f.port, strings.Join(f.arms, ", ")), "")
			continue
		}
		if !local {
			continue
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(f.port))
		if err != nil {
			p.add(node, what, fmt.Errorf("%s %d is taken on this machine: %v", f.flag, f.port, err), "")
			continue
		}
		ln.Close()
		p.add(node, what, nil, fmt.Sprintf("%s %d is free", f.flag, f.port))
	}
}

// external checks that every arm that already runs answers at its base_url and
// reports the pins it was declared with.
func (p *Preflight) external(ctx context.Context, spec *arms.Spec, armList []arms.Arm) {
	preset := arms.PresetFor(spec.Engine.Preset)
	for _, a := range armList {
		base := strings.TrimRight(a.BaseURL, "/")
		health := preset.HealthPath
		if health == "" {
			health = "/v1/models"
		}
		status, _, err := httpGet(ctx, base+health)
		if err == nil && status >= 500 {
			err = fmt.Errorf("%s answered HTTP %d", health, status)
		}
		if err != nil {
			p.add(a.Name, "base_url", fmt.Errorf("%s does not answer: %w", a.BaseURL, err), "")
			continue
		}
		p.add(a.Name, "base_url", nil, a.BaseURL+" answers")
		pc := CheckPins(ctx, preset, a)
		switch {
		case len(pc.Mismatched) > 0:
			p.add(a.Name, "pins", fmt.Errorf("the engine at %s does not run as pinned: %s; arbiter does not judge an arm that is not what it says", a.BaseURL, strings.Join(pc.Mismatched, "; ")), "")
		default:
			p.add(a.Name, "pins", nil, pc.summary())
		}
		for _, u := range pc.Unverified {
			p.Unverified = append(p.Unverified, a.Name+": "+u)
		}
	}
}

func httpGet(ctx context.Context, url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// PinCheck is how an engine's /get_server_info compares with an arm's pins.
type PinCheck struct {
	// Verified are the pins the engine reported as pinned.
	Verified []string
	// Mismatched say which pins the engine reported otherwise, and how.
	Mismatched []string
	// Unverified say which pins the engine did not report, and why.
	Unverified []string
}

func (c PinCheck) summary() string {
	s := fmt.Sprintf("%d pins confirmed by get_server_info", len(c.Verified))
	if len(c.Unverified) > 0 {
		s += fmt.Sprintf(", %d not reported (%s)", len(c.Unverified), strings.Join(c.Unverified, "; "))
	}
	return s
}

// CheckPins reads the engine's /get_server_info at the arm's base_url and compares it
// with the arm's pins: a flag pin with the flag's reported value (a key named after the
// flag, - read as _), an env pin with what the engine reports of its environment
// (refserve reports the variables it reads; SGLang none). A preset without server info
// (vllm, custom) verifies nothing.
func CheckPins(ctx context.Context, preset arms.Preset, a arms.Arm) PinCheck {
	var c PinCheck
	base := strings.TrimRight(a.BaseURL, "/")
	all := func(why string) PinCheck {
		for _, k := range slices.Sorted(maps.Keys(a.Pins.Env)) {
			c.Unverified = append(c.Unverified, k+" ("+why+")")
		}
		for _, f := range pinFlags(a.Pins.Args) {
			c.Unverified = append(c.Unverified, f.name+" ("+why+")")
		}
		return c
	}
	if preset.ServerInfoPath == "" {
		return all("the " + preset.Name + " preset serves no get_server_info")
	}
	status, body, err := httpGet(ctx, base+preset.ServerInfoPath)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d", status)
	}
	if err != nil {
		return all(fmt.Sprintf("get_server_info unreadable: %v", err))
	}
	return ComparePins(body, a.Pins)
}

// ComparePins compares an engine's /get_server_info JSON with pins: a flag pin with
// the value reported under the flag's name (- read as _), an env pin with the
// engine's report of its environment (refserve reports the variables it reads under
// env; SGLang none). A pin the engine does not report is unverified, not mismatched.
func ComparePins(info []byte, pins arms.Pins) PinCheck {
	var c PinCheck
	var m map[string]any
	if err := json.Unmarshal(info, &m); err != nil || m == nil {
		why := "get_server_info is not a JSON object"
		for _, k := range slices.Sorted(maps.Keys(pins.Env)) {
			c.Unverified = append(c.Unverified, k+" ("+why+")")
		}
		for _, f := range pinFlags(pins.Args) {
			c.Unverified = append(c.Unverified, f.name+" ("+why+")")
		}
		return c
	}
	env, hasEnv := m["env"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(pins.Env)) {
		want := pins.Env[k]
		got, ok := env[k].(string)
		switch {
		case !hasEnv || !ok:
			c.Unverified = append(c.Unverified, k+" (the engine does not report it)")
		case got != want:
			c.Mismatched = append(c.Mismatched, fmt.Sprintf("%s is %q, pinned %q", k, got, want))
		default:
			c.Verified = append(c.Verified, k+"="+want)
		}
	}
	for _, f := range pinFlags(pins.Args) {
		key := strings.ReplaceAll(strings.TrimLeft(f.name, "-"), "-", "_")
		v, reported := m[key]
		if !reported {
			c.Unverified = append(c.Unverified, f.name+" (the engine does not report it)")
			continue
		}
		got, on := reportedValue(v)
		switch {
		case f.value == "" && !on:
			c.Mismatched = append(c.Mismatched, fmt.Sprintf("%s is off, pinned on", f.name))
		case f.value != "" && got != f.value:
			c.Mismatched = append(c.Mismatched, fmt.Sprintf("%s is %s, pinned %s", f.name, got, f.value))
		default:
			c.Verified = append(c.Verified, strings.TrimSpace(f.name+" "+f.value))
		}
	}
	return c
}

// reportedValue is a server-info value as a flag's value, and whether it means the
// flag is given (true, or any value but false and null).
func reportedValue(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "null", false
	case bool:
		return strconv.FormatBool(x), x
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	b, _ := json.Marshal(v)
	return string(b), true
}

type pinFlag struct{ name, value string }

// pinFlags reads pinned args as flags with their values: --name value, --name=value
// or a bare --name.
func pinFlags(args []string) []pinFlag {
	var out []pinFlag
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			name, val, _ := strings.Cut(a, "=")
			out = append(out, pinFlag{name: name, value: val})
			continue
		}
		if len(out) > 0 {
			last := &out[len(out)-1]
			last.value = strings.TrimSpace(last.value + " " + a)
		}
	}
	return out
}

// ErrPinsNotHeld reports an arm that already runs (external) whose engine reports
// settings other than its pins: arbiter does not judge it.
var ErrPinsNotHeld = errors.New("the engine does not run as pinned")

// checkExternalPins checks an external arm's pins again at its run: the engine may have
// been restarted with other settings since the preflight.
func (e *experiment) checkExternalPins(ctx context.Context, preset arms.Preset, a arms.Arm) error {
	if e.spec.Runtime.Kind != "external" {
		return nil
	}
	if pc := CheckPins(ctx, preset, a); len(pc.Mismatched) > 0 {
		return fmt.Errorf("arm %s: %w: %s reports %s", a.Name, ErrPinsNotHeld, a.BaseURL, strings.Join(pc.Mismatched, "; "))
	}
	return nil
}
