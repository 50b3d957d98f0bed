// Package arms reads experiment specs: it decodes the YAML (every error names
// file:line:col and the field path), validates it, expands factors into arms, refuses
// confounded arms, and renders each arm's command line and environment.
package arms

import "time"

// Spec is a decoded, validated experiment spec (version 1). docs/spec.md describes the format.
type Spec struct {
	// Path is the file the spec was read from; errors and the store refer to it.
	Path string
	// Source is the spec's text as read, kept so that an experiment can be reproduced.
	Source []byte

	Version int
	Name    string
	Engine  Engine
	Runtime Runtime
	// Arms are the explicit arms, in file order. Empty when the spec uses factors.
	Arms []ArmSpec
	// Factors are the varied factors, in file order. Empty when the spec uses explicit arms.
	Factors []Factor
	// Design is how factors expand: "full-factorial" (default with factors),
	// "one-at-a-time", or "explicit" (default with arms).
	Design    string
	Workload  Workload
	Detectors []string
	// DetectorSecrets name variables of arbiter's environment that the detector plugins
	// may read although they look like credentials (detector_secrets): a plugin gets
	// arbiter's environment without those (PluginEnv). Their values are hidden as
	// engine.secrets' are.
	DetectorSecrets []string
	Analysis        Analysis
	// Blocks is how many times every arm is launched (launches per arm; `launches` or
	// `blocks` in the spec), each block in a fresh random order (default 1).
	Blocks   int
	Timeouts Timeouts
	// Verify is the fixed bar of a verify workload (`verify:`); its zero value has none,
	// and the arms are judged against the reference arm's own launches.
	Verify VerifyBar

	// pos maps a dotted field path (arms.control, factors.hicache.on, engine.env.X) to
	// where it was written, so that checks after decoding (Expand) can still point at
	// the line; empty for a Spec built in code.
	pos map[string]Position
}

// Position is a line and column in a spec file, both from 1; zero when unknown.
type Position struct {
	Line, Col int
}

// Engine is what every arm launches, before the arm's own pins.
type Engine struct {
	// Preset is sglang, vllm, refserve or custom; it supplies health paths, the port flag
	// and defaults for command.
	Preset  string
	Image   string // docker runtime only
	Command []string
	Args    []string
	Env     map[string]string
	// Secrets name variables taken from arbiter's own environment at launch; their values
	// are never stored, logged or printed.
	Secrets []string
	Mounts  []string
	GPUs    int
	// BoolFlags are flags the engine reads without a value that its preset's grammar
	// does not know (args.go): without them, such a flag followed by another flag could
	// be read as taking it as its value, and is refused.
	BoolFlags []string
	// Listen is how the engine takes its address (engine.port); nil keeps the preset's.
	Listen *Listen
	// Endpoints override the preset's paths (engine.endpoints).
	Endpoints Endpoints
	// Model is the model the preset prepares in every launch (engine.model); nil for none.
	Model *ModelSpec
	// Attest are the spec's rules for reading back settings (engine.attest), by pin.
	Attest []AttestRule
}

// Grammar is how the engine reads its command line: its preset's grammar with
// engine.bool_flags added.
func (s *Spec) Grammar() Grammar {
	g := PresetFor(s.Engine.Preset).Grammar
	g.Bool = append(g.Bool, s.Engine.BoolFlags...)
	return g
}

// RuntimeKind is where a spec's arms run.
type RuntimeKind string

// The runtime kinds.
const (
	// RuntimeProcess: each arm a local process (the default).
	RuntimeProcess RuntimeKind = "process"
	// RuntimeDocker: each arm a container, through the Docker Engine API.
	RuntimeDocker RuntimeKind = "docker"
	// RuntimeExternal: arms already running at their base_url.
	RuntimeExternal RuntimeKind = "external"
	// RuntimeSlurm: each arm a Slurm batch job.
	RuntimeSlurm RuntimeKind = "slurm"
)

// Runtime says where arms run.
type Runtime struct {
	// Kind is where the arms run; RuntimeProcess when the spec says nothing.
	Kind RuntimeKind
	// Nodes are the machines arms run on; empty runs on this machine (LocalNode) with
	// one slot, or, for the slurm runtime, on SlurmNode. Spec.Slots cuts them into slots.
	Nodes []Node
	// Slurm is where the slurm runtime submits its jobs; zero for the other kinds.
	Slurm Slurm
}

// Slurm says how arms run as Slurm jobs: one batch job per launch, submitted with
// sbatch's own options. An empty field leaves the cluster's default.
type Slurm struct {
	Partition string   // --partition
	Account   string   // --account
	QOS       string   // --qos
	Time      string   // --time, the job's time limit, e.g. "2:00:00"
	Options   []string // more sbatch options as given, e.g. pyxis's --container-image=IMAGE
	HostFlag  string   // the engine's listen-address flag (default "--host")
	// REST is the cluster's slurmrestd base URL; empty submits with the Slurm commands.
	// Its token comes from arbiter's $SLURM_JWT, its user from $SLURM_USER_NAME (else $USER).
	REST string
}

// Node is one machine that hosts arms: a Docker daemon, or this machine for the
// process runtime.
type Node struct {
	// Name names the node in logs, the store (runs.node) and the verdict.
	Name string
	// Host is the Docker daemon's address (unix://, tcp://); empty (or "local") is the
	// local daemon, and the only value the process runtime takes.
	Host string
	// GPUs are the node's devices: a range such as "0-7", a list such as "0,2", "all"
	// or empty (no pinning). engine.gpus cuts a list into slots.
	GPUs string
	// Slots caps how many arms the node serves at once; on a node with no GPU list it is
	// the number of slots (default 1), e.g. refserve arms sharing a CPU machine.
	Slots int
	// CA, Cert and Key are the TLS files of a tcp:// daemon started with --tlsverify:
	// the CA that signed the daemon's certificate, and arbiter's client certificate and
	// key (PEM; a relative path is read from the spec's folder). All three or none.
	CA, Cert, Key string
	// Publish is the address on the node where engines listen and arbiter reaches them
	// (default 127.0.0.1: a daemon of this machine). A remote daemon needs an address of
	// its own that this machine can reach.
	Publish string
	// Network is "host" to run engines on the node's own network (the port picked by
	// arbiter), or empty for the daemon's default bridge with a published port.
	Network string
}

// Pins are what an arm or a factor level sets on top of the engine's configuration.
type Pins struct {
	Env  map[string]string
	Args []string
}

// ArmSpec is one explicit arm as written in the spec.
type ArmSpec struct {
	Name string
	Pins Pins
	// BaseURL is where the arm already runs (runtime kind external), as
	// bench_serving's --base-url: "http://10.0.0.5:30000".
	BaseURL string
}

// Factor is a varied factor with its levels, in file order.
type Factor struct {
	Name   string
	Levels []Level
}

// Level is one level of a factor.
type Level struct {
	Name string
	Pins Pins
}

// Workload describes the identical, seeded traffic every arm receives.
type Workload struct {
	Kind        string // "toolcall-agent", "throughput", "abort-cascade", "long-context" or "trace"
	Sessions    int
	Rounds      int
	Concurrency int
	Seed        int64
	Temperature float64
	// MaxTokens caps each completion; 0 leaves it to the engine.
	MaxTokens int
	// Model is the model name sent in requests; empty asks the engine's /v1/models.
	Model string
	// Throughput, AbortCascade, LongContext and Trace hold the fields of their kinds; nil
	// unless Kind names it. For those kinds Sessions is every session one run reports
	// (what the verdict counts as planned), whatever the spec called sessions.
	Throughput   *ThroughputSpec
	AbortCascade *AbortCascadeSpec
	LongContext  *LongContextSpec
	Trace        *TraceSpec
	// MaxResponseBytes caps one response's body, SSE framing included; a response that
	// runs past it ends its turn with an error (default DefaultMaxResponseBytes).
	MaxResponseBytes int64
	// NoStream sends non-streaming requests (stream: false); the default streams.
	NoStream bool
}

// Analysis says how the verdict is computed.
type Analysis struct {
	Unit     string  // "session" (default), "response" or "launch"
	Alpha    float64 // default 0.05
	Baseline string  // arm name; default the first arm
	// Margin is the non-inferiority margin on the rate difference; 0 means none declared.
	Margin float64
	// ThroughputMargin is the share of throughput an arm may lose against the baseline
	// and still be non-inferior ("the fix costs at most 5%": 0.05); 0 means none declared.
	ThroughputMargin float64
	// MinEffect is the smallest change of latency or tok/s, as a share of the baseline's,
	// that the verdict calls better or worse: a significant change smaller than it is
	// negligible. 0 calls every significant change; default DefaultMinEffect (2%).
	MinEffect float64
	// MaxLoss is the largest share of an arm's sessions that may be lost (to errors,
	// timeouts, a crash or a wedge) before the verdict calls that arm's corruption
	// decision inconclusive; default DefaultMaxLoss (10%).
	MaxLoss    float64
	Sequential Sequential
	// Plan holds what `arbiter plan` needs; zero when the spec declares no plan.
	Plan Plan
	// DivergenceFloor names an arm that repeats the baseline's pins: how far its replies
	// depart from the baseline's is the A/A floor of divergence (a real engine batching
	// at concurrency is not bit-deterministic), which every other arm's divergence is
	// judged against. Empty: divergence is reported against zero.
	DivergenceFloor string
	// AA declares an A/A check: every arm is meant to be identical, so the confound
	// check allows (and requires) identical arms. Used to measure the false-positive
	// rate of the whole pipeline before trusting an A/B.
	AA bool
	// NoiseFloor names an A/A experiment (its name or id, in the same results database)
	// on the same engine, workload and hardware whose launches measured how launches of
	// one configuration differ: the verdict weighs the arms' difference against that
	// spread, so that one launch per arm can decide. Empty: the experiment's own launches
	// are all there is. `arbiter run --noise-floor` sets it too.
	NoiseFloor string
	// NoiseFloorID is the experiment NoiseFloor names, found in the results database when
	// the experiment starts (never read from the spec); 0 when none.
	NoiseFloorID int64
}

// Plan is what the experiment expects to see, for `arbiter plan`.
type Plan struct {
	P0, P1 float64 // the baseline's corruption rate and the rate the experiment must detect
	// Power is the wanted probability of detecting P1 against P0 (default 0.8).
	Power float64
	// ICC is the expected correlation of responses within a session, for planning with
	// responses as the unit (design effect 1 + (turns-1)·ICC).
	ICC float64
	// LaunchICC is the expected intra-launch correlation of corruption: the share of
	// the session-level variance that lies between launches of one configuration
	// (measure it with an A/A experiment of several launches per arm). LaunchICCSet
	// says whether the spec declared it.
	LaunchICC    float64
	LaunchICCSet bool
	// TurnSeconds is one turn's expected duration, for the wall-time estimate; 0 when
	// unknown (plan then uses the last recorded experiment of the same name).
	TurnSeconds float64
}

// Sequential configures group-sequential stopping over blocks.
type Sequential struct {
	// Looks is how many interim analyses the design has, one after each block (blocks
	// default to looks); 0 is a fixed design.
	Looks int
}

// Timeouts bound each phase of an arm's life.
type Timeouts struct {
	Startup time.Duration // default 30m
	Request time.Duration // default 10m
	Stall   time.Duration // default 120s
	// Detector bounds one detector's judgement of one response (default 60s); a detector
	// that runs past it leaves the response unjudged by it, and is not asked again in
	// that launch.
	Detector time.Duration
}

// Arm is one expanded arm, ready to launch.
type Arm struct {
	Name string
	// Levels maps factor name to level name for factorial designs; nil for explicit arms.
	Levels map[string]string
	// Pins are what this arm sets beyond the engine's common configuration.
	Pins Pins
	// Command is the full command line without the port flag, which the runtime adds.
	Command []string
	// Env is the full environment the arm sets (engine env then pins), without secrets.
	Env map[string]string
	// Secrets are the names of variables copied from arbiter's environment at launch.
	Secrets []string
	// BaseURL is where an external arm already runs; empty for arms arbiter launches.
	BaseURL string
}
