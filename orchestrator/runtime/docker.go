package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/arms"
)

// Labels every container of arbiter carries, so that `arbiter gc` finds leftovers of an
// experiment that died with its containers still there.
const (
	// LabelManaged marks a container as arbiter's ("1").
	LabelManaged = "arbiter.managed"
	// LabelExperiment holds the experiment's ID in the results database
	// (Launch.ExperimentID).
	LabelExperiment = "arbiter.experiment"
	// LabelRun holds the run's ID in the results database (Launch.RunID).
	LabelRun = "arbiter.run"
	// LabelDatabase holds the results database's unique id (Launch.DatabaseID):
	// experiment numbers repeat across databases, this does not.
	LabelDatabase = "arbiter.database"
)

// Docker runs each arm as a container of Launch.Image on one Docker Engine, its port
// published on the engine host's loopback. The zero value is valid and talks to the
// local daemon ($DOCKER_HOST, else the default socket) with the settings SGLang's own
// instructions give for `docker run`.
type Docker struct {
	// Host is the daemon: "" for the local one ($DOCKER_HOST, else the default socket),
	// "unix:///path/docker.sock", "tcp://host:port" or "ssh://[user@]host[:port]" (the
	// Docker CLI's habit: `ssh host docker system dial-stdio`, so the remote needs the
	// docker CLI and this machine key-based ssh access to it).
	Host string
	// TLSCA, TLSCert and TLSKey are the files of a tcp:// daemon that demands TLS
	// (dockerd --tlsverify): the CA that signed the daemon's certificate, and this
	// client's certificate and key, PEM. All three or none; none speaks plain TCP.
	TLSCA, TLSCert, TLSKey string
	// SSHCommand is the ssh client an ssh:// Host is reached through (default "ssh").
	SSHCommand string
	// Network is the containers' network: "" for the daemon's default bridge, the
	// engine's port published on PublishIP; "host" for the node's own network, the
	// engine listening on PublishIP at a port arbiter picks (GPU nodes that run NCCL or
	// RDMA are often set up so; a daemon started with --bridge=none has only this).
	Network string
	// GPUs are the devices an arm gets when Launch.GPUs is empty: "all", a range such
	// as "0-7", or a list such as "0,2,4"; empty for none (unless GPUCount is set).
	GPUs string
	// GPUCount, when above 0, takes the first GPUCount devices of GPUs (of 0..n-1 when
	// GPUs is empty); 0 takes them all.
	GPUCount int
	// Mounts are "src:dst[:ro|:rw]" pairs; an absolute src is a bind mount, which must
	// exist, any other src a named volume.
	Mounts []string
	// ShmSize is the container's /dev/shm in bytes when IPC is not "host" (default
	// 32 GiB, SGLang's --shm-size 32g).
	ShmSize int64
	// IPC is the IPC namespace mode (default "host", as SGLang asks, so that the
	// tensor-parallel ranks and NCCL share memory freely); "private" or "shareable"
	// give the container its own /dev/shm of ShmSize.
	IPC string
	// Memlock is the locked-memory limit in bytes: -1 for unlimited, above 0 for a
	// limit. 0 (default) means unlimited for an arm with GPUs (RDMA and NIXL register
	// pinned host memory) and the daemon's default otherwise, since a daemon whose own
	// hard limit is lower refuses to start a container that asks for more.
	Memlock int64
	// ContainerPort is the port the engine listens on inside the container (default
	// 8000); it is published on a port the daemon picks.
	ContainerPort int
	// HostFlag is the engine's listen-address flag, given 0.0.0.0 so that the published
	// port reaches it (default "--host"; engines such as SGLang listen on 127.0.0.1
	// otherwise). "-" adds none; a command that already sets it is left alone.
	HostFlag string
	// PublishIP is the host address the port is published on (default 127.0.0.1, so
	// that nothing beyond the engine host's loopback can reach an engine).
	PublishIP string
	// Grace is how long Stop waits after SIGTERM before SIGKILL (default 10s).
	Grace time.Duration
	// TailLines is how many log lines an Exit keeps (default 40).
	TailLines int
	// Heartbeat is how often a running engine's daemon is pinged; three pings in a row
	// without an answer (each given Heartbeat) lose the node (default 5s).
	Heartbeat time.Duration

	// hostPort is the port an engine on the host's network listens on, picked by Start.
	hostPort int
}

// defaults fills in the documented zero-value settings.
func (d Docker) defaults() Docker {
	if d.ShmSize <= 0 {
		d.ShmSize = 32 << 30
	}
	if d.IPC == "" {
		d.IPC = "host"
	}
	if d.ContainerPort <= 0 {
		d.ContainerPort = 8000
	}
	if d.HostFlag == "" {
		d.HostFlag = "--host"
	}
	if d.PublishIP == "" {
		d.PublishIP = "127.0.0.1"
	}
	if d.Grace <= 0 {
		d.Grace = 10 * time.Second
	}
	if d.TailLines <= 0 {
		d.TailLines = 40
	}
	if d.Heartbeat <= 0 {
		d.Heartbeat = 5 * time.Second
	}
	return d
}

// ErrBadHost is wrapped by errors about a daemon address arbiter cannot use as given.
var ErrBadHost = errors.New("not a daemon address")

// client opens a client for d.Host; API version negotiation is on, so old daemons
// (API 1.41, Docker 20.10) are spoken to in their own version.
func (d Docker) client() (*client.Client, error) {
	// DOCKER_HOST is read here rather than by client.FromEnv, which knows no ssh://.
	opts := []client.Opt{client.WithTLSClientConfigFromEnv(), client.WithAPIVersionFromEnv()}
	host := d.Host
	if host == "" {
		host = os.Getenv(client.EnvOverrideHost)
	}
	tls := d.TLSCA != "" || d.TLSCert != "" || d.TLSKey != ""
	switch u, err := url.Parse(host); {
	case host == "":
	case err != nil:
		return nil, fmt.Errorf("docker runtime: host %q: %w", host, err)
	case u.Scheme == "ssh":
		if tls {
			return nil, fmt.Errorf("docker runtime: host %s: TLS files are for tcp:// daemons; ssh carries its own encryption", host)
		}
		dial, err := sshDialer(u, d.SSHCommand)
		if err != nil {
			return nil, err
		}
		// The address is a placeholder: every connection goes through ssh.
		opts = append(opts, client.WithHost("http://docker.ssh"), client.WithDialContext(dial))
	case u.Scheme == "unix" || u.Scheme == "tcp":
		opts = append(opts, client.WithHost(host))
	default:
		return nil, fmt.Errorf("docker runtime: host %q: %w: want unix://, tcp:// or ssh:// (or empty for the local daemon)", host, ErrBadHost)
	}
	if tls {
		if d.TLSCA == "" || d.TLSCert == "" || d.TLSKey == "" {
			return nil, fmt.Errorf("docker runtime: host %s: TLS needs all three files: ca, cert and key", host)
		}
		if !strings.HasPrefix(host, "tcp://") {
			return nil, fmt.Errorf("docker runtime: host %q: TLS files are for tcp:// daemons", host)
		}
		for _, f := range []string{d.TLSCA, d.TLSCert, d.TLSKey} {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("docker runtime: host %s: TLS file: %w", host, err)
			}
		}
		opts = append(opts, client.WithTLSClientConfig(d.TLSCA, d.TLSCert, d.TLSKey))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker runtime: client for %q: %w", d.Host, err)
	}
	return cli, nil
}

// connect opens a client and checks that a daemon answers.
func (d Docker) connect(ctx context.Context) (*client.Client, error) {
	cli, err := d.client()
	if err != nil {
		return nil, err
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker runtime: no daemon answers at %s (%w): %w", cli.DaemonHost(), ErrNodeLost, err)
	}
	return cli, nil
}

// Start creates and starts a container for l and returns once it runs.
func (d Docker) Start(ctx context.Context, l Launch) (Instance, error) {
	d = d.defaults()
	if l.Image == "" {
		return nil, errors.New("docker runtime: no image (engine.image)")
	}
	if l.LogPath == "" {
		return nil, errors.New("docker runtime: no log path")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	releasePort := func() {}
	if d.Network == "host" {
		// A port free here; on a daemon of this machine that is the port's own host.
		// On another machine a taken port shows as an engine that exits at once.
		port, release, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("docker runtime: %w", err)
		}
		d.hostPort, releasePort = port, release
	}
	started := false
	defer func() {
		if !started {
			releasePort()
		}
	}()
	cfg, hostCfg, err := d.containerConfig(l)
	if err != nil {
		return nil, err
	}
	if err := d.checkReachable(); err != nil {
		return nil, err
	}
	cli, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(l.LogPath), 0o755); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	logFile, err := os.OpenFile(l.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	name := ContainerName(l.Name)
	// Create and start are not cut short by ctx: a create whose answer is lost would
	// leave a container behind. An interrupt is honoured right after them instead.
	opCtx, cancelOp := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancelOp()
	created, err := cli.ContainerCreate(opCtx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hostCfg})
	if err != nil {
		logFile.Close()
		cli.Close()
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("docker runtime: image %s is not on the daemon (arbiter does not pull; pull or build it there first): %w", l.Image, err)
		}
		return nil, fmt.Errorf("docker runtime: create %s: %w", name, err)
	}
	// From here on a failure removes the container again: nothing is left for gc.
	discard := func(cause error) (Instance, error) {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = cli.ContainerRemove(rmCtx, created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		logFile.Close()
		cli.Close()
		return nil, cause
	}
	if _, err := cli.ContainerStart(opCtx, created.ID, client.ContainerStartOptions{}); err != nil {
		return discard(fmt.Errorf("docker runtime: start %s: %w", name, err))
	}
	if err := ctx.Err(); err != nil {
		return discard(err)
	}
	// Neither follow-logs nor wait may die with the caller's ctx: the instance outlives it.
	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	logs, err := cli.ContainerLogs(bg, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		cancelBG()
		return discard(fmt.Errorf("docker runtime: logs of %s: %w", name, err))
	}
	inspect, err := cli.ContainerInspect(opCtx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		logs.Close()
		cancelBG()
		return discard(fmt.Errorf("docker runtime: inspect %s: %w", name, err))
	}
	inst := &dockerInstance{cli: cli, id: created.ID, name: name, grace: d.Grace, cancel: cancelBG,
		log: newLogSink(logFile, l, d.TailLines), done: make(chan struct{})}
	inst.endpoint = d.endpoint(cli, inspect.Container.NetworkSettings)

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		stdout, stderr := &lineWriter{sink: inst.log}, &lineWriter{sink: inst.log}
		_, _ = stdcopy.StdCopy(stdout, stderr, logs)
		stdout.flush()
		stderr.flush()
	}()
	// A daemon that stops answering without closing the connection (frozen, or cut off
	// by the network) would hold the wait open: the heartbeat gives up on it instead.
	waitCtx, lost := context.WithCancelCause(bg)
	go inst.heartbeat(waitCtx, d.Heartbeat, lost)
	go func() {
		code, oom, waitErr := inst.wait(waitCtx)
		lost(nil)
		// The log stream ends when the container does; a daemon that keeps it open
		// must not hold the exit back.
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
		}
		logs.Close()
		<-copied
		logFile.Close()
		inst.finish(code, oom, waitErr)
		releasePort()
	}()
	started = true
	return inst, nil
}

// containerConfig renders l into the daemon's create request.
func (d Docker) containerConfig(l Launch) (*container.Config, *container.HostConfig, error) {
	if d.Network == "host" && d.hostPort == 0 {
		return nil, nil, errors.New("docker runtime: host network without a port")
	}
	listen := d.ContainerPort
	if d.Network == "host" {
		listen = d.hostPort
	}
	port, err := network.ParsePort(strconv.Itoa(listen) + "/tcp")
	if err != nil {
		return nil, nil, fmt.Errorf("docker runtime: container port: %w", err)
	}
	publish, err := netip.ParseAddr(d.PublishIP)
	if err != nil {
		return nil, nil, fmt.Errorf("docker runtime: publish address %q: %w", d.PublishIP, err)
	}
	cfg := &container.Config{
		Image:  l.Image,
		Env:    slices.Clone(l.Env),
		Labels: launchLabels(l),
	}
	if d.Network != "host" {
		cfg.ExposedPorts = network.PortSet{port: {}}
	}
	// On the host's network the engine listens where it is to be reached, and no
	// wider; in its own namespace it must listen where the published port arrives.
	addr := "0.0.0.0"
	if d.Network == "host" {
		addr = d.PublishIP
	}
	if len(l.Command) > 0 {
		// The command's first element is the binary inside the image; the image's own
		// entrypoint (often a shell wrapper) would otherwise swallow it.
		cfg.Entrypoint = []string{l.Command[0]}
	}
	args, listenEnv := l.address(addr, listen, d.HostFlag)
	cfg.Cmd = args
	cfg.Env = append(cfg.Env, listenEnv...)

	mounts, err := parseMounts(d.Mounts)
	if err != nil {
		return nil, nil, err
	}
	gpus := l.GPUs
	count := 0
	if gpus == "" {
		gpus, count = d.GPUs, d.GPUCount
	}
	devices, err := deviceRequests(gpus, count)
	if err != nil {
		return nil, nil, err
	}
	hostCfg := &container.HostConfig{
		Mounts:    mounts,
		IpcMode:   container.IpcMode(d.IPC),
		ShmSize:   d.ShmSize,
		Resources: container.Resources{DeviceRequests: devices},
	}
	switch d.Network {
	case "":
		hostCfg.PortBindings = network.PortMap{port: {{HostIP: publish}}}
	case "host":
		hostCfg.NetworkMode = "host"
	default:
		return nil, nil, fmt.Errorf("docker runtime: network %q: want host, or nothing for the daemon's bridge", d.Network)
	}
	if d.IPC == "host" {
		// The host's /dev/shm is used; a size would only be ignored.
		hostCfg.ShmSize = 0
	}
	memlock := d.Memlock
	if memlock == 0 && len(devices) > 0 {
		memlock = -1
	}
	if memlock != 0 {
		hostCfg.Ulimits = []*container.Ulimit{{Name: "memlock", Soft: memlock, Hard: memlock}}
	}
	return cfg, hostCfg, nil
}

// checkReachable refuses a remote daemon whose engines would be published on its own
// loopback, where arbiter cannot reach them.
func (d Docker) checkReachable() error {
	u, err := url.Parse(d.Host)
	if d.Host == "" || err != nil || (u.Scheme != "tcp" && u.Scheme != "ssh") {
		return nil
	}
	if ip, err := netip.ParseAddr(d.PublishIP); err == nil && !ip.IsLoopback() {
		return nil
	}
	if isLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("docker runtime: daemon %s is on another machine, but engines listen on %s there; give the node an address this machine can reach (publish)", u.Redacted(), d.PublishIP)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// endpoint is the engine's URL as arbiter reaches it. It is empty when the container
// exited before its port could be read (Done is then closed or about to be).
func (d Docker) endpoint(cli *client.Client, ns *container.NetworkSettings) string {
	host := d.PublishIP
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if u, err := url.Parse(d.Host); err == nil && (u.Scheme == "tcp" || u.Scheme == "ssh") {
			host = u.Hostname()
		} else if u, err := url.Parse(cli.DaemonHost()); err == nil && u.Scheme == "tcp" {
			host = u.Hostname()
		}
	}
	if d.Network == "host" {
		return "http://" + net.JoinHostPort(host, strconv.Itoa(d.hostPort))
	}
	if ns == nil {
		return ""
	}
	port, _ := network.ParsePort(strconv.Itoa(d.ContainerPort) + "/tcp")
	for _, b := range ns.Ports[port] {
		if b.HostPort != "" {
			return "http://" + net.JoinHostPort(host, b.HostPort)
		}
	}
	return ""
}

// hasFlag reports whether args already set flag, as "--flag v" or "--flag=v".
func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// launchLabels are the labels a container of l carries: arbiter's mark, and the
// experiment, run and database it belongs to, where l names them.
func launchLabels(l Launch) map[string]string {
	labels := map[string]string{LabelManaged: "1"}
	if l.ExperimentID != 0 {
		labels[LabelExperiment] = strconv.FormatInt(l.ExperimentID, 10)
	}
	if l.RunID != 0 {
		labels[LabelRun] = strconv.FormatInt(l.RunID, 10)
	}
	if l.DatabaseID != "" {
		labels[LabelDatabase] = l.DatabaseID
	}
	return labels
}

// ContainerName derives a Docker-safe, unique container name from a launch name:
// factorial arm names hold "=" and ",", which Docker refuses, and two databases may
// both hold an experiment 3. The random suffix keeps a leftover of an earlier run
// from blocking a new one.
func ContainerName(launch string) string {
	var b strings.Builder
	b.WriteString("arbiter-")
	for _, r := range launch {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		case r == '=':
			b.WriteByte('.')
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 100 {
			break
		}
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	b.WriteByte('-')
	b.WriteString(hex.EncodeToString(suffix[:]))
	return b.String()
}

// parseMounts reads "src:dst[:ro|:rw]".
func parseMounts(specs []string) ([]mount.Mount, error) {
	var out []mount.Mount
	for _, s := range specs {
		parts := strings.Split(s, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("docker runtime: mount %q: want src:dst or src:dst:ro", s)
		}
		m := mount.Mount{Type: mount.TypeVolume, Source: parts[0], Target: parts[1]}
		if filepath.IsAbs(parts[0]) {
			m.Type = mount.TypeBind
		}
		if !strings.HasPrefix(parts[1], "/") {
			return nil, fmt.Errorf("docker runtime: mount %q: the container path must be absolute", s)
		}
		if len(parts) == 3 {
			switch parts[2] {
			case "ro":
				m.ReadOnly = true
			case "rw":
			default:
				return nil, fmt.Errorf("docker runtime: mount %q: option %q: want ro or rw", s, parts[2])
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// deviceRequests pins GPUs through the nvidia driver: "all", "0-3" or "0,2"; count
// above 0 takes the first count of them.
func deviceRequests(gpus string, count int) ([]container.DeviceRequest, error) {
	gpu := [][]string{{"gpu"}}
	if gpus == "" && count <= 0 {
		return nil, nil
	}
	if gpus == "all" {
		n := -1
		if count > 0 {
			n = count
		}
		return []container.DeviceRequest{{Driver: "nvidia", Count: n, Capabilities: gpu}}, nil
	}
	var ids []string
	if gpus == "" {
		for i := range count {
			ids = append(ids, strconv.Itoa(i))
		}
	} else {
		var err error
		if ids, err = ParseGPUs(gpus); err != nil {
			return nil, err
		}
	}
	if count > 0 {
		if count > len(ids) {
			return nil, fmt.Errorf("docker runtime: %d GPUs per arm, but only %d in %q", count, len(ids), gpus)
		}
		ids = ids[:count]
	}
	return []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: ids, Capabilities: gpu}}, nil
}

// ParseGPUs expands a device set such as "0-3" or "0,2,5-6" into device IDs, in order,
// without duplicates (arms.ExpandGPUs, which the spec's checks use too).
func ParseGPUs(s string) ([]string, error) {
	ids, err := arms.ExpandGPUs(s)
	if err != nil {
		return nil, fmt.Errorf("docker runtime: GPUs %q: %w", s, err)
	}
	return ids, nil
}

type dockerInstance struct {
	cli      *client.Client
	id, name string
	endpoint string
	grace    time.Duration
	log      *logSink
	cancel   context.CancelFunc // ends the follow-logs and wait requests
	done     chan struct{}

	mu      sync.Mutex
	stopped bool
	exit    Exit

	removeOnce sync.Once
	removeErr  error
}

func (i *dockerInstance) Endpoint() string { return i.endpoint }

// InstanceID is "container " and the container's short id.
func (i *dockerInstance) InstanceID() string { return "container " + shortContainerID(i.id) }

func shortContainerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
func (i *dockerInstance) Done() <-chan struct{} { return i.done }

func (i *dockerInstance) Exit() Exit {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.exit
}

// wait blocks until the container is no longer running and reads how it ended.
func (i *dockerInstance) wait(ctx context.Context) (code int, oom bool, err error) {
	w := i.cli.ContainerWait(ctx, i.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		code = int(r.StatusCode)
		if r.Error != nil && r.Error.Message != "" {
			err = errors.New(r.Error.Message)
		}
	case err = <-w.Error:
		code = -1
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrNodeLost) {
		// The heartbeat gave up on the daemon: asking it more would only wait again.
		return -1, false, cause
	}
	// OOM is only in the container's state; a failed wait may still have an answer there.
	inspCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	insp, ierr := i.cli.ContainerInspect(inspCtx, i.id, client.ContainerInspectOptions{})
	if ierr == nil && insp.Container.State != nil {
		st := insp.Container.State
		oom = st.OOMKilled
		if !st.Running {
			code, err = st.ExitCode, nil
		}
		return code, oom, err
	}
	// No answer about the container: if the daemon answers nothing at all, the node is
	// lost (stopped, crashed, cut off), and with it whatever the engine was doing; a
	// daemon that shuts down stops its containers first, so even a clean exit code
	// read just before is no engine's own end.
	if ierr != nil && !cerrdefs.IsNotFound(ierr) {
		if _, perr := i.cli.Ping(inspCtx, client.PingOptions{}); perr != nil {
			lost := perr
			if err != nil {
				lost = err
			}
			return -1, false, fmt.Errorf("%w: daemon %s: %v", ErrNodeLost, i.cli.DaemonHost(), lost)
		}
	}
	return code, oom, err
}

func (i *dockerInstance) finish(code int, oom bool, waitErr error) {
	i.mu.Lock()
	e := Exit{Code: code, Stopped: i.stopped, LogTail: i.log.tail()}
	switch {
	case oom:
		e.Code, e.Signal = -1, "SIGKILL (out of memory)"
	case code > 128 && code <= 128+64:
		// The container's init was killed by a signal; Docker reports 128+signal.
		e.Code, e.Signal = -1, signalName(syscall.Signal(code-128))
	}
	if waitErr != nil {
		e.LogTail = strings.TrimLeft(e.LogTail+"\n[arbiter: lost track of the container: "+waitErr.Error()+"]", "\n")
		switch {
		case errors.Is(waitErr, ErrNodeLost):
			e.Lost = waitErr.Error()
		case !i.stopped:
			e.Lost = "lost track of the container: " + waitErr.Error()
		}
	}
	i.exit = e
	i.mu.Unlock()
	close(i.done)
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGILL: "SIGILL", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGTERM: "SIGTERM"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// heartbeatMisses is how many pings in a row may go unanswered before a node is lost.
const heartbeatMisses = 3

// heartbeat pings the daemon every interval while the engine runs, and ends ctx with
// an ErrNodeLost cause once heartbeatMisses pings in a row went unanswered.
func (i *dockerInstance) heartbeat(ctx context.Context, every time.Duration, lost context.CancelCauseFunc) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-i.done:
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		_, err := i.cli.Ping(pctx, client.PingOptions{})
		cancel()
		switch {
		case err == nil:
			misses = 0
		case ctx.Err() != nil:
			return
		default:
			if misses++; misses >= heartbeatMisses {
				lost(fmt.Errorf("%w: daemon %s: %d pings in a row went unanswered: %v", ErrNodeLost, i.cli.DaemonHost(), misses, err))
				return
			}
		}
	}
}

// Stop stops the container (SIGTERM, SIGKILL after the grace period or when ctx ends)
// and removes it; its log file stays.
func (i *dockerInstance) Stop(ctx context.Context) error {
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	select {
	case <-i.done:
	default:
		grace := int(i.grace.Round(time.Second) / time.Second)
		stopErr := make(chan error, 1)
		go func() {
			_, err := i.cli.ContainerStop(ctx, i.id, client.ContainerStopOptions{Timeout: &grace})
			stopErr <- err
		}()
		select {
		case <-i.done:
		case <-ctx.Done():
			i.kill(bg)
		case err := <-stopErr:
			if err != nil {
				// The daemon could not stop it gracefully: force it.
				i.kill(bg)
			}
		}
		select {
		case <-i.done:
		case <-time.After(i.grace + 30*time.Second):
			return i.remove(bg, fmt.Errorf("docker runtime: container %s did not exit", i.name))
		}
	}
	return i.remove(bg, nil)
}

func (i *dockerInstance) kill(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = i.cli.ContainerKill(ctx, i.id, client.ContainerKillOptions{Signal: "SIGKILL"})
}

// remove deletes the container once, whatever happened before, and releases the client.
func (i *dockerInstance) remove(ctx context.Context, cause error) error {
	i.removeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := i.cli.ContainerRemove(ctx, i.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			i.removeErr = fmt.Errorf("docker runtime: remove %s (arbiter gc removes it later): %w", i.name, err)
		}
		i.cancel()
		<-i.done
		i.cli.Close()
	})
	return errors.Join(cause, i.removeErr)
}
