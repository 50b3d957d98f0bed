package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/arbiterlab/arbiter/plugins/proto"
)

// Handshake is what arbiter and a detector binary check before they talk: a binary run by
// hand, or built for another protocol version, refuses to start instead of misbehaving.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ARBITER_DETECTOR_PLUGIN",
	MagicCookieValue: "arbiter-detector-v1",
}

// DetectorPluginName is the name under which a binary serves its detector.
const DetectorPluginName = "detector"

// nameTimeout bounds the Name call made when a plugin is dispensed.
const nameTimeout = 30 * time.Second

// MaxAnswerBytes bounds one answer of a plugin, as gRPC receives it: a label is a name, a
// flag and a few words, and an answer larger than this is refused before it is decoded.
const MaxAnswerBytes = 64 << 10

// maxNameBytes bounds a plugin's name, which every label of it carries.
const maxNameBytes = 64

// CheckName says whether a plugin's name can be one: 1 to 64 letters, digits, '.', '_' or
// '-', so that it reads the same in a database, a terminal and a verdict.
func CheckName(name string) error {
	if name == "" {
		return errors.New("the plugin returned an empty name")
	}
	if len(name) > maxNameBytes {
		return fmt.Errorf("the plugin's name is %d bytes, over the limit of %d", len(name), maxNameBytes)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("the plugin's name %q holds %q: a name is letters, digits, '.', '_' and '-'", name, r)
		}
	}
	return nil
}

// DetectorPlugin carries a Detector over gRPC. The plugin side sets Impl; the host side
// leaves it nil and gets a Detector back from Dispense.
type DetectorPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the detector a plugin binary serves.
	Impl Detector
}

var _ plugin.GRPCPlugin = (*DetectorPlugin)(nil)

// GRPCServer registers Impl with the plugin's gRPC server.
func (p *DetectorPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("plugins: DetectorPlugin served without a detector (Impl is nil)")
	}
	pluginpb.RegisterDetectorServer(s, &detectorServer{impl: p.Impl})
	return nil
}

// GRPCClient returns the host's Detector for a connected plugin. It asks the plugin's
// name once, here, since Detector.Name cannot fail.
func (p *DetectorPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	client := pluginpb.NewDetectorClient(c)
	ctx, cancel := context.WithTimeout(ctx, nameTimeout)
	defer cancel()
	resp, err := client.Name(ctx, &pluginpb.NameRequest{})
	if err != nil {
		return nil, fmt.Errorf("plugin detector: name: %w", rpcError(err))
	}
	if err := CheckName(resp.GetName()); err != nil {
		return nil, fmt.Errorf("plugin detector: name: %w", err)
	}
	return &remoteDetector{name: resp.GetName(), client: client}, nil
}

// detectorServer is the plugin side: it decodes requests for the served detector.
type detectorServer struct {
	pluginpb.UnimplementedDetectorServer
	impl Detector
}

func (s *detectorServer) Name(context.Context, *pluginpb.NameRequest) (*pluginpb.NameResponse, error) {
	return &pluginpb.NameResponse{Name: s.impl.Name()}, nil
}

func (s *detectorServer) Detect(ctx context.Context, req *pluginpb.DetectRequest) (*pluginpb.DetectResponse, error) {
	var r Response
	if err := json.Unmarshal(req.GetCompletionJson(), &r.Completion); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "completion: %v", err)
	}
	if len(req.GetToolsJson()) > 0 {
		if err := json.Unmarshal(req.GetToolsJson(), &r.Tools); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "tools: %v", err)
		}
	}
	if tc := req.GetToolChoiceJson(); len(tc) > 0 {
		if !json.Valid(tc) {
			return nil, status.Error(codes.InvalidArgument, "tool_choice: not JSON")
		}
		r.ToolChoice = json.RawMessage(tc)
	}
	l, err := s.impl.Detect(ctx, r)
	if err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	if l.Detector == "" {
		l.Detector = s.impl.Name()
	}
	return &pluginpb.DetectResponse{Detector: l.Detector, Corrupted: l.Corrupted, Reason: l.Reason}, nil
}

// remoteDetector is the host side: a Detector whose judgement happens in the plugin.
type remoteDetector struct {
	name   string
	client pluginpb.DetectorClient
}

func (d *remoteDetector) Name() string { return d.name }

func (d *remoteDetector) Detect(ctx context.Context, r Response) (Label, error) {
	completion, err := json.Marshal(r.Completion)
	if err != nil {
		return Label{}, fmt.Errorf("plugin detector %s: encode completion: %w", d.name, err)
	}
	req := &pluginpb.DetectRequest{CompletionJson: completion, ToolChoiceJson: r.ToolChoice}
	if len(r.Tools) > 0 {
		if req.ToolsJson, err = json.Marshal(r.Tools); err != nil {
			return Label{}, fmt.Errorf("plugin detector %s: encode tools: %w", d.name, err)
		}
	}
	resp, err := d.client.Detect(ctx, req, grpc.MaxCallRecvMsgSize(MaxAnswerBytes))
	if err != nil {
		return Label{}, fmt.Errorf("plugin detector %s: %w", d.name, rpcError(err))
	}
	// The label is the plugin's, whatever detector it claims to speak for: a plugin must
	// not be able to write, or erase, another detector's findings.
	return Label{Detector: d.name, Corrupted: resp.GetCorrupted(), Reason: resp.GetReason()}, nil
}

// rpcError turns a gRPC status back into the plugin's own message where there is one, and
// keeps cancellation recognisable with errors.Is.
func rpcError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", st.Message(), context.DeadlineExceeded)
	case codes.Unknown:
		return errors.New(st.Message())
	}
	return fmt.Errorf("%s: %s", st.Code(), st.Message())
}

// Serve runs d as an external detector: the whole main of a detector binary is
// plugins.Serve(myDetector{}). It returns only when arbiter stops the plugin; run by hand,
// the binary says it is a plugin and exits.
func Serve(d Detector) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{DetectorPluginName: &DetectorPlugin{Impl: d}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}

// Launch starts the detector binary at path and returns its Detector and a function that
// stops the process (safe to call more than once). The binary gets the environment
// WithEnv gives, else arbiter's whole environment, which is how a plugin is configured;
// its standard error goes where WithOutput says, each line through its redactor
// (output.go).
// ctx bounds the start only: its deadline, if it has one, replaces go-plugin's one-minute
// start timeout, and the plugin then lives until release is called.
func Launch(ctx context.Context, path string) (Detector, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	o := outputOf(ctx)
	// What the plugin writes to its standard error comes two ways: before it serves, from
	// its process; once it serves, forwarded by go-plugin over gRPC (SyncStderr).
	out, synced := newLineRedactors(o, "detector plugin "+filepath.Base(path))
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{DetectorPluginName: &DetectorPlugin{}},
		Cmd:              exec.Command(path),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Stderr:           out,
		SyncStderr:       synced,
		// go-plugin traces every step by default; arbiter's stderr wants problems only.
		// The lines it logs of the plugin's own go through the same redactor.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "plugin", Level: hclog.Warn, Output: out}),
	}
	if env, ok := envOf(ctx); ok {
		// go-plugin adds arbiter's environment to the command's unless told not to.
		cfg.Cmd.Env, cfg.SkipHostEnv = slices.Clone(env), true
	}
	if dl, ok := ctx.Deadline(); ok {
		cfg.StartTimeout = max(time.Until(dl), time.Millisecond)
	}
	client := plugin.NewClient(cfg)
	var once sync.Once
	release := func() {
		once.Do(func() {
			client.Kill()
			out.Flush()
			synced.Flush()
		})
	}
	rpc, err := client.Client()
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("plugin %s: start: %w", path, err)
	}
	raw, err := rpc.Dispense(DetectorPluginName)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	d, ok := raw.(Detector)
	if !ok {
		release()
		return nil, nil, fmt.Errorf("plugin %s: served a %T, not a detector", path, raw)
	}
	return d, release, nil
}
