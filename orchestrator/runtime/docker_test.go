package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

// The docker tests run refserve in an image built from scratch on the local daemon,
// once per test binary. Without a daemon they skip, except where ARBITER_REQUIRE_DOCKER=1
// (CI) makes the missing daemon a failure.
var (
	imageOnce sync.Once
	imageTag  string
	imageErr  error
	noDaemon  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if imageTag != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := (Docker{}).RemoveImage(ctx, imageTag); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup:", err)
		}
		cancel()
	}
	os.Exit(code)
}

// refserveImage returns the tag of the test image, building it on first use.
func refserveImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cli, err := Docker{}.connect(ctx)
		if err != nil {
			noDaemon = err
			return
		}
		cli.Close()
		// The image's engine is built as `make image` builds it: static, so that the
		// image holds nothing but the binary.
		bin, err := testbin.Binary("github.com/arbiterlab/arbiter/cmd/refserve", testbin.Static...)
		if err != nil {
			imageErr = err
			return
		}
		files, err := ExecutableFiles(bin, "/refserve")
		if err != nil {
			imageErr = err
			return
		}
		if len(files) != 1 {
			imageErr = fmt.Errorf("refserve built with arbiter_static is dynamically linked: it needs %v", files[1:])
			return
		}
		tag := "arbiter-test/refserve:" + randomHex(6)
		if imageErr = (Docker{}).BuildImage(ctx, tag, files); imageErr == nil {
			imageTag = tag
		}
	})
	if noDaemon != nil {
		if os.Getenv("ARBITER_REQUIRE_DOCKER") == "1" {
			t.Fatalf("ARBITER_REQUIRE_DOCKER=1 but no Docker daemon answers: %v", noDaemon)
		}
		t.Skipf("no Docker daemon answers (set ARBITER_REQUIRE_DOCKER=1 to make this a failure): %v", noDaemon)
	}
	if imageErr != nil {
		t.Fatalf("test image: %v", imageErr)
	}
	return imageTag
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// waitHealthy polls the engine's /health until it answers 200: a readiness check with a
// deadline, failing early if the container exits.
func waitHealthy(t *testing.T, inst Instance) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if inst.Endpoint() != "" {
			if resp, err := client.Get(inst.Endpoint() + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		select {
		case <-inst.Done():
			t.Fatalf("engine exited before it was healthy: %s\n%s", inst.Exit(), inst.Exit().LogTail)
		case <-deadline:
			t.Fatalf("engine at %s not healthy within 30s", inst.Endpoint())
		case <-tick.C:
		}
	}
}

// containerExists asks the daemon whether a container with this name is there.
func containerExists(t *testing.T, name string) bool {
	t.Helper()
	left, err := Docker{}.Leftovers(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(left, func(l Leftover) bool { return l.Name == name })
}

func TestDockerServesPinnedEngineAndStopRemovesContainer(t *testing.T) {
	image := refserveImage(t)
	const secret = "s3cr3tToken"
	logPath := filepath.Join(t.TempDir(), "logs", "engine.log")
	l := Launch{Name: "exp7-bf16_index_k=1,hicache=on-b0", Image: image,
		Command: []string{"/refserve", "--served-model-name", secret + "-model", "--enable-hierarchical-cache"},
		Env:     []string{"BF16_INDEX_K=1"}, LogPath: logPath,
		Redact: func(s string) string { return strings.ReplaceAll(s, secret, "[redacted]") }}
	inst, err := Docker{Grace: 5 * time.Second}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	d := inst.(*dockerInstance)
	t.Cleanup(func() { inst.Stop(context.Background()) })
	if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+$`).MatchString(inst.Endpoint()) {
		t.Fatalf("endpoint %q is not on the host's loopback", inst.Endpoint())
	}
	waitHealthy(t, inst)

	resp, err := http.Get(inst.Endpoint() + "/get_server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		BF16IndexK bool              `json:"bf16_index_k"`
		HiCache    bool              `json:"enable_hierarchical_cache"`
		Port       int               `json:"port"`
		Env        map[string]string `json:"env"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !info.BF16IndexK || info.Env["BF16_INDEX_K"] != "1" || !info.HiCache {
		t.Errorf("server info = %+v, want the BF16_INDEX_K=1 pin and HiCache on", info)
	}
	if info.Port != 8000 {
		t.Errorf("engine listens on %d inside the container, want 8000", info.Port)
	}
	if !containerExists(t, d.name) {
		t.Fatalf("container %s is not listed as arbiter's", d.name)
	}

	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	default:
		t.Fatal("Stop returned before the engine was gone")
	}
	if e := inst.Exit(); e.Crashed() || e.Code != 0 {
		t.Errorf("exit = %+v, want a clean stop (refserve exits 0 on SIGTERM)", e)
	}
	if containerExists(t, d.name) {
		t.Errorf("container %s still exists after Stop", d.name)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if !strings.Contains(log, "The server is fired up and ready to roll!") {
		t.Errorf("log lacks the engine's ready line:\n%s", log)
	}
	if strings.Contains(log, secret) || !strings.Contains(log, "[redacted]-model") {
		t.Errorf("log is not redacted:\n%s", log)
	}
}

func TestDockerReportsCrashWithExitCodeAndLogTail(t *testing.T) {
	image := refserveImage(t)
	l := Launch{Name: "exp8-control-b1", Image: image, Command: []string{"/refserve", "--no-such-flag"},
		LogPath: filepath.Join(t.TempDir(), "engine.log")}
	inst, err := Docker{}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("container with a bad flag did not exit")
	}
	e := inst.Exit()
	if e.Code != 2 || !e.Crashed() || e.Signal != "" {
		t.Fatalf("exit = %+v, want code 2 and crashed", e)
	}
	if !strings.Contains(e.LogTail, "flag provided but not defined: -no-such-flag") {
		t.Errorf("log tail %q lacks the engine's last words", e.LogTail)
	}
	name := inst.(*dockerInstance).name
	if !containerExists(t, name) {
		t.Fatal("a crashed container must stay until Stop, for its logs")
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := inst.Exit(); !e.Crashed() {
		t.Errorf("Stop after the crash turned it into a stop: %+v", e)
	}
	if containerExists(t, name) {
		t.Errorf("container %s still exists after Stop", name)
	}
}

func TestDockerStopKillsWhenContextEnds(t *testing.T) {
	image := refserveImage(t)
	l := Launch{Name: "exp9-treatment-b0", Image: image, Command: []string{"/refserve"},
		LogPath: filepath.Join(t.TempDir(), "engine.log")}
	inst, err := Docker{Grace: time.Minute}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, inst)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if e := inst.Exit(); e.Signal != "SIGKILL" || e.Code != -1 || e.Crashed() {
		t.Errorf("exit = %+v, want SIGKILL and stopped", e)
	}
}

func TestDockerLeftoversFindsAndRemovesLabelledContainers(t *testing.T) {
	image := refserveImage(t)
	l := Launch{Name: "exp42-control-b3", Image: image, Command: []string{"/refserve"},
		LogPath: filepath.Join(t.TempDir(), "engine.log"), ExperimentID: 42, RunID: 7, DatabaseID: "d0c5-test"}
	inst, err := Docker{}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	name := inst.(*dockerInstance).name
	// arbiter was killed here, before it could stop the arm.
	left, err := Docker{}.Leftovers(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(left, func(l Leftover) bool { return l.Name == name })
	if i < 0 {
		t.Fatalf("leftovers %+v lack %s", left, name)
	}
	if got := left[i]; got.Experiment != "42" || got.Run != "7" || got.Database != "d0c5-test" || got.State != "running" || got.Image != image {
		t.Errorf("leftover = %+v, want experiment 42, run 7, database d0c5-test, running, image %s", got, image)
	}
	if err := (Docker{}).Remove(context.Background(), left[i].ID); err != nil {
		t.Fatal(err)
	}
	if containerExists(t, name) {
		t.Fatalf("container %s survived Remove", name)
	}
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("instance did not notice its container was removed")
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Errorf("Stop of a container already removed: %v", err)
	}
}

func TestDockerStartErrors(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "engine.log")
	cases := []struct {
		d    Docker
		l    Launch
		want string
	}{
		{Docker{}, Launch{Command: []string{"/refserve"}, LogPath: logPath}, "no image"},
		{Docker{}, Launch{Image: "x", Command: []string{"/refserve"}}, "no log path"},
		{Docker{Host: "ssh://ops:pw@127.0.0.1"}, Launch{Image: "x", LogPath: logPath}, "no passwords in the address"},
		{Docker{Host: "http://node-a"}, Launch{Image: "x", LogPath: logPath}, "want unix://, tcp:// or ssh://"},
		{Docker{Host: "ssh://127.0.0.1/var/run/docker.sock"}, Launch{Image: "x", LogPath: logPath}, "takes no path"},
		{Docker{Host: "ssh://127.0.0.1", TLSCA: "ca.pem"}, Launch{Image: "x", LogPath: logPath}, "TLS files are for tcp://"},
		{Docker{Host: "tcp://127.0.0.1:2376", TLSCA: "ca.pem"}, Launch{Image: "x", LogPath: logPath}, "all three files"},
		{Docker{Host: "tcp://127.0.0.1:2376", TLSCA: "/nonexistent/ca.pem", TLSCert: "c", TLSKey: "k"}, Launch{Image: "x", LogPath: logPath}, "TLS file"},
		{Docker{Host: "ssh://ops@node-a"}, Launch{Image: "x", LogPath: logPath}, "is on another machine"},
		{Docker{Network: "overlay"}, Launch{Image: "x", LogPath: logPath}, "want host"},
		{Docker{Host: "tcp://node-a:2375"}, Launch{Image: "x", LogPath: logPath}, "is on another machine"},
		{Docker{Mounts: []string{"/models"}}, Launch{Image: "x", LogPath: logPath}, "want src:dst"},
		{Docker{GPUs: "0-1", GPUCount: 4}, Launch{Image: "x", LogPath: logPath}, "only 2"},
	}
	for _, c := range cases {
		_, err := c.d.Start(context.Background(), c.l)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start(%+v, %+v) = %v, want an error saying %q", c.d, c.l, err, c.want)
		}
	}
	// DOCKER_HOST=ssh://... goes through ssh like a node's host; here to an ssh that
	// does not exist, which the error names.
	t.Setenv("DOCKER_HOST", "ssh://ops@127.0.0.1")
	_, err := (Docker{SSHCommand: "/nonexistent/ssh"}).Start(context.Background(), Launch{Image: "x", LogPath: logPath})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/ssh") {
		t.Errorf("Start with DOCKER_HOST=ssh://... through a missing ssh = %v, want an error naming it", err)
	}
}

func TestDockerStartWithMissingImageSaysSo(t *testing.T) {
	refserveImage(t)
	l := Launch{Name: "exp1-a-b0", Image: "arbiter-test/absent:" + randomHex(4), Command: []string{"/refserve"},
		LogPath: filepath.Join(t.TempDir(), "engine.log")}
	_, err := Docker{}.Start(context.Background(), l)
	if err == nil || !strings.Contains(err.Error(), "arbiter does not pull") {
		t.Fatalf("Start with a missing image = %v, want an error that says it is not there", err)
	}
}

func TestContainerConfigRendersLaunch(t *testing.T) {
	d := Docker{GPUs: "0-7", GPUCount: 4, Mounts: []string{"/models:/models:ro", "hf-cache:/root/.cache/huggingface"}}.defaults()
	l := Launch{Name: "exp3-hicache=on,overlap=off-b1", Image: "lmsysorg/sglang:v0.5",
		Command: []string{"python3", "-m", "sglang.launch_server", "--tp", "4"}, Env: []string{"BF16_INDEX_K=1"},
		ExperimentID: 3, RunID: 17, DatabaseID: "0f1e2d3c-0000-4000-8000-000000000000"}
	cfg, host, err := d.containerConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"python3"}; !slices.Equal(cfg.Entrypoint, want) {
		t.Errorf("entrypoint = %q, want %q", cfg.Entrypoint, want)
	}
	if want := []string{"-m", "sglang.launch_server", "--tp", "4", "--host", "0.0.0.0", "--port", "8000"}; !slices.Equal(cfg.Cmd, want) {
		t.Errorf("cmd = %q, want %q", cfg.Cmd, want)
	}
	if cfg.Labels[LabelManaged] != "1" || cfg.Labels[LabelExperiment] != "3" || cfg.Labels[LabelRun] != "17" ||
		cfg.Labels[LabelDatabase] != l.DatabaseID {
		t.Errorf("labels = %v", cfg.Labels)
	}
	// A launch of no recorded run carries arbiter's mark only.
	if cfg, _, _ := d.containerConfig(Launch{Name: "probe", Image: "x"}); len(cfg.Labels) != 1 {
		t.Errorf("labels of a launch without ids = %v", cfg.Labels)
	}
	if !slices.Equal(cfg.Env, l.Env) {
		t.Errorf("env = %q, want %q", cfg.Env, l.Env)
	}
	want := []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"0", "1", "2", "3"}, Capabilities: [][]string{{"gpu"}}}}
	if got := host.DeviceRequests; len(got) != 1 || !slices.Equal(got[0].DeviceIDs, want[0].DeviceIDs) || got[0].Driver != "nvidia" {
		t.Errorf("device requests = %+v, want %+v", got, want)
	}
	if host.IpcMode != "host" {
		t.Errorf("ipc = %q, want host", host.IpcMode)
	}
	if len(host.Ulimits) != 1 || host.Ulimits[0].Name != "memlock" || host.Ulimits[0].Hard != -1 {
		t.Errorf("ulimits = %+v, want memlock unlimited for an arm with GPUs", host.Ulimits)
	}
	wantMounts := []mount.Mount{{Type: mount.TypeBind, Source: "/models", Target: "/models", ReadOnly: true},
		{Type: mount.TypeVolume, Source: "hf-cache", Target: "/root/.cache/huggingface"}}
	if !slices.Equal(host.Mounts, wantMounts) {
		t.Errorf("mounts = %+v, want %+v", host.Mounts, wantMounts)
	}
	for p, bs := range host.PortBindings {
		if p.Num() != 8000 || len(bs) != 1 || bs[0].HostIP.String() != "127.0.0.1" || bs[0].HostPort != "" {
			t.Errorf("port binding %v -> %+v, want 8000 on 127.0.0.1, host port picked by the daemon", p, bs)
		}
	}

	// Without GPUs nothing asks for memlock (a daemon with a lower hard limit refuses it);
	// a private IPC namespace gets SGLang's 32 GiB /dev/shm; a command that names its
	// host keeps it.
	d = Docker{IPC: "private"}.defaults()
	l.Command = []string{"/refserve", "--host=0.0.0.0"}
	cfg, host, err = d.containerConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	if host.Ulimits != nil || host.DeviceRequests != nil || host.ShmSize != 32<<30 {
		t.Errorf("host config = ulimits %+v, devices %+v, shm %d", host.Ulimits, host.DeviceRequests, host.ShmSize)
	}
	if want := []string{"--host=0.0.0.0", "--port", "8000"}; !slices.Equal(cfg.Cmd, want) {
		t.Errorf("cmd = %q, want %q", cfg.Cmd, want)
	}
}

func TestDeviceRequests(t *testing.T) {
	cases := []struct {
		gpus  string
		count int
		ids   []string
		n     int
	}{
		{"", 0, nil, 0},
		{"all", 0, nil, -1},
		{"all", 2, nil, 2},
		{"", 2, []string{"0", "1"}, 0},
		{"0,1", 0, []string{"0", "1"}, 0},
		{"4-7", 2, []string{"4", "5"}, 0},
	}
	for _, c := range cases {
		got, err := deviceRequests(c.gpus, c.count)
		if err != nil {
			t.Fatalf("deviceRequests(%q, %d): %v", c.gpus, c.count, err)
		}
		if c.gpus == "" && c.count == 0 {
			if got != nil {
				t.Errorf("no GPUs asked, got %+v", got)
			}
			continue
		}
		if len(got) != 1 || !slices.Equal(got[0].DeviceIDs, c.ids) || got[0].Count != c.n || got[0].Driver != "nvidia" {
			t.Errorf("deviceRequests(%q, %d) = %+v, want ids %q count %d", c.gpus, c.count, got, c.ids, c.n)
		}
	}
}

func TestParseGPUs(t *testing.T) {
	good := map[string][]string{"0-3": {"0", "1", "2", "3"}, "0,1": {"0", "1"}, "0,2,5-6": {"0", "2", "5", "6"},
		"3": {"3"}, "1,1,0-1": {"1", "0"}}
	for in, want := range good {
		got, err := ParseGPUs(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseGPUs(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "-1", "0-", "0,,1", "0-99999"} {
		if got, err := ParseGPUs(in); err == nil {
			t.Errorf("ParseGPUs(%q) = %q, want an error", in, got)
		}
	}
}

func FuzzParseGPUs(f *testing.F) {
	for _, s := range []string{"0-7", "0,1", "all", "0,2,5-6", "3-1", "", "1,1", " 2 , 4-5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseGPUs(s)
		if err != nil {
			return
		}
		if len(ids) == 0 {
			t.Fatalf("ParseGPUs(%q) gave no devices and no error", s)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] || !regexp.MustCompile(`^(0|[1-9][0-9]*)$`).MatchString(id) {
				t.Fatalf("ParseGPUs(%q) = %q: duplicate or malformed %q", s, ids, id)
			}
			seen[id] = true
		}
		// The expansion is a fixed point: parsing it again changes nothing.
		again, err := ParseGPUs(strings.Join(ids, ","))
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("ParseGPUs(%q) = %q, but its re-parse is %q, %v", s, ids, again, err)
		}
	})
}

var dockerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func FuzzContainerName(f *testing.F) {
	for _, s := range []string{"exp3-control-b0", "exp12-bf16_index_k=1,hicache=on,overlap=off-b1", "", "ärm/💥 x", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, launch string) {
		a, b := ContainerName(launch), ContainerName(launch)
		if !dockerName.MatchString(a) || len(a) > 128 {
			t.Fatalf("ContainerName(%q) = %q: not a name Docker accepts", launch, a)
		}
		if a == b {
			t.Fatalf("ContainerName(%q) gave %q twice: a leftover would block the next launch", launch, a)
		}
	})
}

func TestMountsParse(t *testing.T) {
	for _, bad := range []string{"/models", "/a:b", "/a:/b:rx", ":/b", "/a:/b:ro:x"} {
		if _, err := parseMounts([]string{bad}); err == nil {
			t.Errorf("parseMounts(%q) accepted it", bad)
		}
	}
}

func TestLineWriterKeepsStreamsApart(t *testing.T) {
	var sb strings.Builder
	sink := newLogSink(&sb, Launch{}, 10)
	out, errw := &lineWriter{sink: sink}, &lineWriter{sink: sink}
	out.Write([]byte("loading wei"))
	errw.Write([]byte("warn: slow disk\n"))
	out.Write([]byte("ghts\nready\npartial"))
	out.flush()
	want := "warn: slow disk\nloading weights\nready\npartial\n"
	if sb.String() != want {
		t.Errorf("log = %q, want %q", sb.String(), want)
	}
	if sink.tail() != "warn: slow disk\nloading weights\nready\npartial" {
		t.Errorf("tail = %q", sink.tail())
	}
}

// An ssh:// daemon is reached as the Docker CLI reaches it: `ssh HOST docker system
// dial-stdio`. The ssh here is a stand-in that checks what it is asked to run and runs
// it on this machine, so the whole path (create, logs, wait, stop) crosses a real
// dial-stdio session to the real daemon.
func TestDockerThroughSSHDialStdio(t *testing.T) {
	image := refserveImage(t)
	if _, err := exec.LookPath("docker"); err != nil {
		if os.Getenv("ARBITER_REQUIRE_DOCKER") == "1" {
			t.Fatal("ARBITER_REQUIRE_DOCKER=1 but there is no docker CLI for dial-stdio")
		}
		t.Skip("no docker CLI to run dial-stdio")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "ssh")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n" +
		`case "$*" in "-o BatchMode=yes -p 2222 -l ops -- 127.0.0.1 docker system dial-stdio") exec docker system dial-stdio;; esac` + "\n" +
		"echo \"ssh stand-in: unexpected arguments: $*\" >&2\nexit 255\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := Docker{Host: "ssh://ops@127.0.0.1:2222", SSHCommand: fake, Grace: 5 * time.Second}
	l := Launch{Name: "exp11-ssh-b0", Image: image, Command: []string{"/refserve"}, Env: []string{"BF16_INDEX_K=1"},
		LogPath: filepath.Join(dir, "engine.log"), RunID: 5}
	inst, err := d.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	waitHealthy(t, inst)
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := inst.Exit(); e.Crashed() || e.Code != 0 || e.Lost != "" {
		t.Errorf("exit = %+v, want a clean stop", e)
	}
	b, err := os.ReadFile(calls)
	if err != nil || !strings.Contains(string(b), "dial-stdio") {
		t.Fatalf("the ssh stand-in was not used (%v): %q", err, b)
	}
	log, _ := os.ReadFile(l.LogPath)
	if !strings.Contains(string(log), "fired up and ready") {
		t.Errorf("the engine's log did not come through the ssh session:\n%s", log)
	}

	// A refused login says what ssh said.
	d.Host = "ssh://intruder@127.0.0.1:2222"
	if _, err := d.Start(context.Background(), l); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("Start through a refusing ssh = %v, want ssh's own words", err)
	}
}

// On the host's network the engine listens on the port arbiter picked, on loopback.
func TestDockerHostNetwork(t *testing.T) {
	image := refserveImage(t)
	l := Launch{Name: "exp12-host-b0", Image: image, Command: []string{"/refserve"},
		LogPath: filepath.Join(t.TempDir(), "engine.log")}
	inst, err := Docker{Network: "host", Grace: 5 * time.Second}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	waitHealthy(t, inst)
	resp, err := http.Get(inst.Endpoint() + "/get_server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Host string `json:"host"`
		Port int    `json:"port"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("http://127.0.0.1:%d", info.Port); info.Host != "127.0.0.1" || inst.Endpoint() != want {
		t.Errorf("engine listens on %s:%d, endpoint %s; want loopback and %s", info.Host, info.Port, inst.Endpoint(), want)
	}
}
