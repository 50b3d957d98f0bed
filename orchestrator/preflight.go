package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/gguf"
	"github.com/arbiterlab/arbiter/internal/enginehttp"
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
	// err is the failure, kept so that Err can say a pin check failed (ErrPinsNotHeld).
	err error
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
	causes := []error{ErrPreflight}
	for _, c := range p.Checks {
		if !c.OK {
			bad = append(bad, fmt.Sprintf("%s: %s: %s", c.Node, c.What, c.Detail))
			// A pin not held is said as such (exit code 5); the other failures'
			// causes (a socket not there) are the preflight's, not the user's file.
			if errors.Is(c.err, ErrPinsNotHeld) || errors.Is(c.err, ErrPinsUncheckable) {
				causes = append(causes, c.err)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &preflightError{msg: fmt.Sprintf("%v (nothing was recorded):\n  %s", ErrPreflight, strings.Join(bad, "\n  ")), causes: causes}
}

// preflightError says every failed check; errors.Is sees ErrPreflight, and
// ErrPinsNotHeld or ErrPinsUncheckable when a pin check failed.
type preflightError struct {
	msg    string
	causes []error
}

func (e *preflightError) Error() string   { return e.msg }
func (e *preflightError) Unwrap() []error { return e.causes }

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
	p.model(spec)
	if spec.Runtime.Kind == arms.RuntimeExternal {
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
		sharedNet := spec.Runtime.Kind != arms.RuntimeDocker || n.Network == "host"
		local := spec.Runtime.Kind != arms.RuntimeDocker || (arms.IsLocalHost(n.Host) && os.Getenv("DOCKER_HOST") == "") || strings.HasPrefix(n.Host, "unix://")
		switch spec.Runtime.Kind {
		case arms.RuntimeDocker:
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

// model checks the file of the spec's model, which arbiter hands to every launch once
// its engine is ready: it is there and is a GGUF file, and one whose heads head_dim pads
// is a model arbiter can pad to that size. A file that is not would fail every launch
// after its engine started.
func (p *Preflight) model(spec *arms.Spec) {
	m := spec.Engine.Model
	if m == nil || m.File == "" || spec.Preset().Models != arms.ModelsOllama {
		return
	}
	what := "model " + m.Name
	if m.HeadDim > 0 {
		tr, err := gguf.ReadTrained(m.File)
		natural := 0
		if err == nil {
			tr.HeadDim = m.HeadDim
			natural, _, err = tr.Heads()
		}
		if err != nil {
			err = fmt.Errorf("engine.model.head_dim %d: %w", m.HeadDim, err)
		}
		p.add("local", what, err, fmt.Sprintf("%s: heads of %d padded to %d", m.File, natural, m.HeadDim))
		return
	}
	f, err := os.Open(m.File)
	if err != nil {
		p.add("local", what, fmt.Errorf("engine.model.file: %w", err), "")
		return
	}
	defer f.Close()
	magic := make([]byte, len(gguf.Magic))
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != gguf.Magic {
		p.add("local", what, fmt.Errorf("engine.model.file: %s is not a GGUF file (it does not start with %q)", m.File, gguf.Magic), "")
		return
	}
	p.add("local", what, nil, m.File+" is a GGUF file")
}

func (p *Preflight) add(node, what string, err error, ok string) {
	if err != nil {
		p.Checks = append(p.Checks, Check{Node: node, What: what, Detail: err.Error(), err: err})
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
	runtimeFlag := spec.Preset().Listen.Flag
	grammar := spec.Grammar()
	var out []fixedPort
	for _, a := range armList {
		flags, _ := grammar.Parse(a.Command) // a command line Expand accepted
		for _, f := range flags {
			if !strings.HasPrefix(f.Name, "--") || !strings.HasSuffix(f.Name, "-port") || f.Name == runtimeFlag || f.Bare() {
				continue
			}
			val := f.Value
			if !f.Bound() {
				val = f.Tokens[1]
			}
			port, err := strconv.Atoi(val)
			if err != nil || port <= 0 || port > 65535 {
				continue
			}
			j := slices.IndexFunc(out, func(fp fixedPort) bool { return fp.flag == f.Name && fp.port == port })
			if j < 0 {
				out = append(out, fixedPort{flag: f.Name, port: port})
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
	preset := spec.Preset()
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
			p.add(a.Name, "base_url", fmt.Errorf("%s does not answer: %w", arms.RedactURL(a.BaseURL), err), "")
			continue
		}
		p.add(a.Name, "base_url", nil, arms.RedactURL(a.BaseURL)+" answers")
		pc, err := CheckPins(ctx, spec, a)
		switch {
		case err != nil:
			p.add(a.Name, "pins", err, "")
			continue
		case len(pc.Mismatched) > 0:
			p.add(a.Name, "pins", &pinsNotHeld{fmt.Sprintf("the engine at %s does not run as pinned: %s; arbiter does not judge an arm that is not what it says", arms.RedactURL(a.BaseURL), strings.Join(pc.Mismatched, "; "))}, "")
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
	resp, err := enginehttp.Client(0).Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the address, which the caller names through arms.RedactURL
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// pinsNotHeld is a pin check's failure in its own words; it wraps ErrPinsNotHeld.
type pinsNotHeld struct{ msg string }

func (e *pinsNotHeld) Error() string { return e.msg }
func (e *pinsNotHeld) Unwrap() error { return ErrPinsNotHeld }
