// Package slurmtest starts a real Slurm cluster on this machine for tests: a munged of
// its own, a slurmctld, and two or more slurmd nodes, each in a network namespace of its
// own with its own address, whose fake GPUs (character devices made with mknod) are
// declared as gres, so that Slurm assigns them and exports CUDA_VISIBLE_DEVICES.
//
// It needs root, iproute2 and Debian's munge, slurmctld, slurmd and slurm-client. Without
// them a test skips, unless ARBITER_REQUIRE_SLURM=1 (CI) makes the missing part a failure.
//
// Accounting is Slurm's job completion log (JobCompType=jobcomp/filetxt, read back with
// `sacct -c`) rather than slurmdbd: slurmdbd needs a MySQL/MariaDB server, which would
// double what CI installs and starts for no check the tests need; what a running job was
// given (its node, its GPU indices, its batch script) is Slurm's own `scontrol show job
// -d` and `scontrol write batch_script`.
package slurmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nodeInterface names an end of node k's veth pair in cluster id: side 'h' the host's, 'n'
// the node's namespace's. IsNodeInterface recognizes every name it makes.
func nodeInterface(id int, side byte, k int) string {
	return fmt.Sprintf("as%04x%c%d", id, side, k)
}

var nodeInterfaceName = regexp.MustCompile(`^as[0-9a-f]{4}[hn][0-9]+$`)

// IsNodeInterface reports whether name is an end of a veth pair that a test cluster makes
// for its nodes and deletes with them; other tests that compare the host's interfaces
// leave those out.
func IsNodeInterface(name string) bool { return nodeInterfaceName.MatchString(name) }

// RequireEnv is the variable that turns a skip into a failure.
const RequireEnv = "ARBITER_REQUIRE_SLURM"

// LoopbackEnv set to 1 runs the nodes on the loopback even where namespaces work.
const LoopbackEnv = "ARBITER_SLURMTEST_LOOPBACK"

// Options shape the cluster; the zero value gives two nodes of two GPUs and four CPUs.
type Options struct {
	Nodes       int // default 2
	GPUsPerNode int // default 2
	CPUsPerNode int // default 4
	// REST also starts slurmrestd (as user slurm, JWT auth) on a loopback port.
	REST bool
}

// Node is one slurmd.
type Node struct {
	Name  string // NodeName, e.g. "n1"
	Addr  string // its address inside its namespace, e.g. "10.213.8.2"
	NetNS string // the network namespace it runs in
	GPUs  []string
}

// Cluster is a started cluster; Start stops it when the test ends.
type Cluster struct {
	Dir       string // configuration, state, logs and fake devices
	Conf      string // slurm.conf: SLURM_CONF for every client command
	JobComp   string // the job completion log
	Partition string // the one partition, holding every node
	Nodes     []Node
	// Namespaces is true when every node runs in a network namespace of its own; false
	// when they share this machine's loopback, for the reason Why gives.
	Namespaces bool
	Why        string
	// RESTURL and Token reach slurmrestd when Options.REST: a JWT of user root, sent as
	// X-SLURM-USER-NAME: root and X-SLURM-USER-TOKEN.
	RESTURL, Token string

	procs []*daemon
	links []string
}

// Available says why no cluster can be started here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("not root (slurmd and network namespaces need root)")
	}
	for _, b := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sacct", "ip", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("%s not installed (apt-get install munge slurmctld slurmd slurm-client iproute2)", b)
		}
	}
	return nil
}

// jwtPlugin reports whether slurmctld's auth/jwt plugin, which slurmrestd's tokens need,
// is where distributions put Slurm's plugins.
func jwtPlugin() bool {
	for _, pattern := range []string{"/usr/lib/*/slurm-wlm/auth_jwt.so", "/usr/lib/slurm/auth_jwt.so", "/usr/lib64/slurm/auth_jwt.so", "/usr/local/lib/slurm/auth_jwt.so"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return true
		}
	}
	return false
}

// Start starts a cluster, or skips the test (fails it under ARBITER_REQUIRE_SLURM=1) where
// none can run.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	err := Available()
	if _, lerr := exec.LookPath("slurmrestd"); err == nil && o.REST && lerr != nil {
		err = errors.New("slurmrestd not installed (apt-get install slurmrestd)")
	}
	if err == nil && o.REST && !jwtPlugin() {
		err = errors.New("slurmctld's auth/jwt plugin (auth_jwt.so) not installed (apt-get install slurm-wlm-jwt-plugin)")
	}
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("slurm cluster: %v (%s=1)", err, RequireEnv)
		}
		t.Skipf("slurm cluster: %v (set %s=1 to fail instead)", err, RequireEnv)
	}
	if o.Nodes <= 0 {
		o.Nodes = 2
	}
	if o.GPUsPerNode <= 0 {
		o.GPUsPerNode = 2
	}
	if o.CPUsPerNode <= 0 {
		o.CPUsPerNode = 4
	}
	dir, err := os.MkdirTemp("", "arbiter-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	// munged and slurmd check that the paths above their files are not writable by others.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), JobComp: filepath.Join(dir, "jobcomp.txt"), Partition: "gpu"}
	t.Cleanup(func() { c.stop(t) })
	if err := c.start(o); err != nil {
		t.Fatalf("slurm cluster: %v\n%s", err, c.logs())
	}
	if !c.Namespaces {
		t.Logf("slurm cluster: %s", c.Why)
	}
	return c
}

// Env is what a client command needs to reach this cluster.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// Command runs a Slurm client command against this cluster and returns its output.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Completions returns the job completion log as read by `sacct -c`: one map per job,
// keyed by sacct's field names (JobID, JobName, State, NodeList, ...).
func (c *Cluster) Completions(ctx context.Context) ([]map[string]string, error) {
	fields := []string{"JobID", "JobName", "State", "NodeList", "Partition", "ExitCode", "Start", "End"}
	out, err := c.Command(ctx, "sacct", "-c", "-X", "-P", "-n", "--format="+strings.Join(fields, ","))
	if err != nil {
		return nil, err
	}
	var jobs []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		vals := strings.Split(line, "|")
		m := map[string]string{}
		for i, f := range fields {
			if i < len(vals) {
				m[f] = vals[i]
			}
		}
		jobs = append(jobs, m)
	}
	return jobs, nil
}

func (c *Cluster) start(o Options) error {
	id := rand.IntN(1 << 16)
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	host, _, _ = strings.Cut(host, ".")
	// A /16 of 10.0.0.0/8 that no interface here uses yet; node k gets 10.X.k.0/24.
	var subnet string
	for try := 0; ; try++ {
		subnet = fmt.Sprintf("10.%d.", 100+rand.IntN(150))
		if !addrInUse(subnet) {
			break
		}
		if try > 20 {
			return errors.New("no free 10.x.0.0/16 address range for the nodes")
		}
	}
	var ctlAddr string
	ctlPort, err := freePort()
	if err != nil {
		return err
	}
	dPort, err := freePort()
	if err != nil {
		return err
	}

	// munge: a daemon and key of the cluster's own, on its own socket.
	sock := filepath.Join(c.Dir, "munge", "munge.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return err
	}
	key := make([]byte, 128)
	for i := range key {
		key[i] = byte(rand.IntN(256))
	}
	keyFile := filepath.Join(c.Dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		return err
	}
	if err := c.daemon("munged", "munged", "-F", "-f", "--socket="+sock, "--key-file="+keyFile,
		"--pid-file="+filepath.Join(c.Dir, "munged.pid"), "--log-file="+filepath.Join(c.Dir, "munged.log"),
		"--seed-file="+filepath.Join(c.Dir, "munged.seed")); err != nil {
		return err
	}
	if err := c.waitFor(10*time.Second, func() error { _, err := os.Stat(sock); return err }); err != nil {
		return fmt.Errorf("munged did not create its socket: %w", err)
	}

	// Nodes: a namespace, a veth pair (host side .1, node side .2 of its own /24), and
	// fake GPU devices. Where no namespace can be made (a container without
	// CAP_SYS_ADMIN, or LoopbackEnv=1), every slurmd runs on this machine's loopback with a
	// port of its own: the jobs then share the host's ports and addresses.
	var nodeLines, gresLines []string
	c.Namespaces = os.Getenv(LoopbackEnv) != "1"
	if c.Namespaces {
		probe := fmt.Sprintf("arbslurm%04x-probe", id)
		if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
			c.Namespaces = false
			c.Why = fmt.Sprintf("no network namespaces here (ip netns add: %v: %s): nodes share the loopback", err, strings.TrimSpace(string(out)))
		} else {
			exec.Command("ip", "netns", "delete", probe).Run()
		}
	} else {
		c.Why = LoopbackEnv + "=1: nodes share the loopback"
	}
	for k := 1; k <= o.Nodes; k++ {
		n := Node{Name: fmt.Sprintf("n%d", k), NetNS: fmt.Sprintf("arbslurm%04x-%d", id, k)}
		hostIf, nodeIf := nodeInterface(id, 'h', k), nodeInterface(id, 'n', k)
		hostAddr, nodeAddr := fmt.Sprintf("%s%d.1", subnet, k), fmt.Sprintf("%s%d.2", subnet, k)
		n.Addr = nodeAddr
		portSpec := ""
		if !c.Namespaces {
			port, err := freePort()
			if err != nil {
				return err
			}
			n.NetNS, n.Addr, hostAddr, portSpec = "", "127.0.0.1", "127.0.0.1", fmt.Sprintf(" Port=%d", port)
		}
		steps := [][]string{
			{"netns", "add", n.NetNS},
			{"link", "add", hostIf, "type", "veth", "peer", "name", nodeIf},
			{"link", "set", nodeIf, "netns", n.NetNS},
			{"addr", "add", hostAddr + "/24", "dev", hostIf},
			{"link", "set", hostIf, "up"},
			{"-n", n.NetNS, "addr", "add", nodeAddr + "/24", "dev", nodeIf},
			{"-n", n.NetNS, "link", "set", nodeIf, "up"},
			{"-n", n.NetNS, "link", "set", "lo", "up"},
			{"-n", n.NetNS, "route", "add", "default", "via", hostAddr},
		}
		if !c.Namespaces {
			steps = nil
		}
		for i, s := range steps {
			if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
			}
			if i == 0 {
				c.links = append(c.links, "netns:"+n.NetNS)
			}
			if i == 1 {
				c.links = append(c.links, "link:"+hostIf)
			}
		}
		var files []string
		for g := 0; g < o.GPUsPerNode; g++ {
			f := filepath.Join(c.Dir, "dev", fmt.Sprintf("%s-gpu%d", n.Name, g))
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return err
			}
			// Character device 1:3, the same as /dev/null: something Slurm can stat as a
			// device, that no program will mistake for a GPU.
			if err := syscall.Mknod(f, syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
				return fmt.Errorf("mknod %s: %w", f, err)
			}
			files = append(files, f)
			n.GPUs = append(n.GPUs, fmt.Sprint(g))
		}
		if err := os.MkdirAll(filepath.Join(c.Dir, "spool", n.Name), 0o755); err != nil {
			return err
		}
		nodeLines = append(nodeLines, fmt.Sprintf("NodeName=%s NodeAddr=%s%s CPUs=%d RealMemory=1000 Gres=gpu:%d State=UNKNOWN",
			n.Name, n.Addr, portSpec, o.CPUsPerNode, o.GPUsPerNode))
		for _, f := range files {
			gresLines = append(gresLines, fmt.Sprintf("NodeName=%s Name=gpu File=%s", n.Name, f))
		}
		c.Nodes = append(c.Nodes, n)
		if k == 1 {
			// The controller is reached at the host side of the first node's link, from
			// the host and (through their default routes) from every node.
			ctlAddr = hostAddr
		}
	}
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
	}
	jwtLines := ""
	if o.REST {
		key := make([]byte, 32)
		for i := range key {
			key[i] = byte(rand.IntN(256))
		}
		keyFile := filepath.Join(c.Dir, "jwt.key")
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			return err
		}
		jwtLines = "AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=" + keyFile + "\n"
	}
	conf := fmt.Sprintf(`# written by arbiter's slurmtest harness
ClusterName=arbtest
SlurmctldHost=%s(%s)
SlurmctldPort=%d
SlurmdPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%s
MailProg=/bin/true
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool/%%n
SlurmctldPidFile=%s/slurmctld.pid
SlurmdPidFile=%s/slurmd-%%n.pid
SlurmctldLogFile=%s/slurmctld.log
SlurmdLogFile=%s/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=%s
%sSelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MinJobAge=3600
KillWait=5
SlurmdTimeout=30
%s
PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP
`, host, ctlAddr, ctlPort, dPort, sock, c.Dir, c.Dir, c.Dir, c.Dir, c.Dir, c.Dir, c.JobComp, jwtLines,
		strings.Join(nodeLines, "\n"), c.Partition, strings.Join(names, ","))
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "gres.conf"), []byte(strings.Join(gresLines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "state"), 0o755); err != nil {
		return err
	}
	if err := c.daemon("slurmctld", "slurmctld", "-D", "-i"); err != nil {
		return err
	}
	ctx := context.Background()
	if err := c.waitFor(30*time.Second, func() error { _, err := c.Command(ctx, "scontrol", "ping"); return err }); err != nil {
		return fmt.Errorf("slurmctld did not answer: %w", err)
	}
	for _, n := range c.Nodes {
		// nsenter, not `ip netns exec`: the latter remounts /sys, hiding the cgroup fs.
		argv := []string{"slurmd", "-D", "-N", n.Name}
		if n.NetNS != "" {
			argv = append([]string{"nsenter", "--net=/run/netns/" + n.NetNS}, argv...)
		}
		if err := c.daemon("slurmd-"+n.Name, argv...); err != nil {
			return err
		}
	}
	if err := c.waitFor(60*time.Second, func() error {
		out, err := c.Command(ctx, "sinfo", "-h", "-N", "-o", "%N %t")
		if err != nil {
			return err
		}
		idle := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		if idle != len(c.Nodes) {
			return fmt.Errorf("nodes not idle yet:\n%s", out)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("slurmd nodes did not register: %w", err)
	}
	if o.REST {
		return c.startREST(ctx)
	}
	return nil
}

// startREST starts slurmrestd, which refuses to run as root, as user slurm, taking JWTs
// (AuthAltTypes=auth/jwt), and gets a token for root.
func (c *Cluster) startREST(ctx context.Context) error {
	if _, err := exec.LookPath("slurmrestd"); err != nil {
		return fmt.Errorf("slurmrestd not installed (apt-get install slurmrestd)")
	}
	u, err := user.Lookup("slurm")
	if err != nil {
		return fmt.Errorf("slurmrestd needs a user slurm: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	port, err := freePort()
	if err != nil {
		return err
	}
	out, err := os.Create(filepath.Join(c.Dir, "slurmrestd.out"))
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("slurmrestd", "-s", "openapi/v0.0.38", addr)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Env = append(cmd.Env, "SLURM_JWT=daemon")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start slurmrestd: %w", err)
	}
	out.Close()
	d := &daemon{name: "slurmrestd", cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(d.done) }()
	c.procs = append(c.procs, d)
	tok, err := c.Command(ctx, "scontrol", "token", "username=root", "lifespan=7200")
	if err != nil {
		return err
	}
	c.Token = strings.TrimPrefix(strings.TrimSpace(tok), "SLURM_JWT=")
	c.RESTURL = "http://" + addr
	return c.waitFor(20*time.Second, func() error {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// daemon starts one daemon of the cluster in the foreground, its output in DIR/NAME.out.
func (c *Cluster) daemon(name string, argv ...string) error {
	out, err := os.Create(filepath.Join(c.Dir, name+".out"))
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	out.Close()
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(d.done) }()
	c.procs = append(c.procs, d)
	return nil
}

// daemon is one started daemon; done is closed once it has exited.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// alive fails once any daemon of the cluster has exited, so that a start that cannot
// succeed is not waited out.
func (c *Cluster) alive() error {
	for _, d := range c.procs {
		select {
		case <-d.done:
			return fmt.Errorf("%s exited: %s", d.name, d.cmd.ProcessState)
		default:
		}
	}
	return nil
}

func (c *Cluster) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Jobs first, so that no engine outlives the cluster.
	if out, err := c.Command(ctx, "squeue", "-h", "-o", "%i"); err == nil && strings.TrimSpace(out) != "" {
		c.Command(ctx, "scancel", strings.Fields(out)...)
		c.waitFor(20*time.Second, func() error {
			out, err := c.Command(ctx, "squeue", "-h", "-o", "%i")
			if err == nil && strings.TrimSpace(out) != "" {
				return errors.New("jobs remain")
			}
			return nil
		})
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		d := c.procs[i]
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
	for _, l := range c.links {
		kind, name, _ := strings.Cut(l, ":")
		switch kind {
		case "netns":
			exec.Command("ip", "netns", "delete", name).Run()
		case "link":
			exec.Command("ip", "link", "delete", name).Run()
		}
	}
	if t.Failed() {
		t.Logf("slurm cluster logs (kept in %s):\n%s", c.Dir, c.logs())
		return
	}
	os.RemoveAll(c.Dir)
}

// logs returns the tail of every daemon's log, for a failed test.
func (c *Cluster) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.Dir, "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), strings.Join(lines, "\n"))
	}
	return b.String()
}

// waitFor polls check until it returns nil or the time is up.
func (c *Cluster) waitFor(limit time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	var err error
	for delay := 20 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		if err = check(); err == nil {
			return nil
		}
		if dead := c.alive(); dead != nil {
			return dead
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

func addrInUse(prefix string) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if strings.HasPrefix(a.String(), prefix) {
			return true
		}
	}
	return false
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
