//go:build linux

package dockertest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/internal/testkit/slurmtest"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// Two daemons are two nodes: each holds the image built into it and only its own
// containers, and one that is killed loses the engine it ran (reported as lost, not
// crashed) while the other's engine serves on.
func TestTwoDaemonsAreSeparateNodes(t *testing.T) {
	ds := Start(t, 2)
	image := RefserveImage(t, ds...)
	insts := make([]runtime.Instance, len(ds))
	for i, d := range ds {
		rt := runtime.Docker{Host: d.Host, Network: "host", Grace: 5 * time.Second}
		inst, err := rt.Start(context.Background(), runtime.Launch{Name: "exp1-arm" + strconv.Itoa(i) + "-b0", RunID: int64(i + 1),
			Image: image, Command: []string{"refserve"}, LogPath: filepath.Join(t.TempDir(), "engine.log")})
		if err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
		t.Cleanup(func() { inst.Stop(context.Background()) })
		insts[i] = inst
		WaitHealthy(t, inst)
	}
	for i, d := range ds {
		cli, err := client.New(client.WithHost(d.Host))
		if err != nil {
			t.Fatal(err)
		}
		list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
		cli.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Labels[runtime.LabelRun] != strconv.Itoa(i+1) {
			t.Errorf("%s lists %d containers (%+v), want only its own run %d", d.Name, len(list.Items), list.Items, i+1)
		}
	}

	ds[0].Kill()
	select {
	case <-insts[0].Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the engine of a killed daemon was not reported ended within 30s")
	}
	if e := insts[0].Exit(); e.Lost == "" || e.Crashed() {
		t.Errorf("exit after the daemon's end = %+v, want lost (not crashed)", e)
	}
	select {
	case <-insts[1].Done():
		t.Fatalf("the other node's engine ended too: %+v", insts[1].Exit())
	default:
	}
	WaitHealthy(t, insts[1])
}

// A daemon leaves nothing behind: neither its folder nor its bridge, and the host's
// other interfaces (the system daemon's docker0 above all) are as they were. The
// interfaces the project's test harnesses make are left out of the comparison: the
// tests of other packages, running beside this one, add and delete them meanwhile.
func TestRemoveLeavesNothing(t *testing.T) {
	bin := Require(t)
	before := interfaces(t)
	d, err := start(bin, "node-x", false)
	if err != nil {
		t.Fatal(err)
	}
	bridge := d.Bridge
	if bridge == "" || !slices.Contains(interfaces(t), bridge) {
		t.Fatalf("the daemon's bridge %q is not among the interfaces %v", bridge, interfaces(t))
	}
	d.Kill()
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Remove (%v)", d.Dir, err)
	}
	after := interfaces(t)
	if slices.Contains(after, bridge) {
		t.Errorf("the daemon's bridge %s is still there after Remove: %v", bridge, after)
	}
	for _, name := range before {
		if !harnessInterface(name) && !slices.Contains(after, name) {
			t.Errorf("interface %s was there before the daemon and is gone after it: before %v, after %v", name, before, after)
		}
	}
}

// harnessInterface tells the interfaces test harnesses make and delete: a container's
// veth end, a test daemon's bridge, and a Slurm test node's veth pair.
func harnessInterface(name string) bool {
	return strings.HasPrefix(name, "veth") || strings.HasPrefix(name, bridgePrefix) || slurmtest.IsNodeInterface(name)
}

func TestHarnessInterfacesAreOnlyTheTests(t *testing.T) {
	for name, want := range map[string]bool{"veth1a2b3c": true, bridgePrefix + "123": true, "asa318h1": true, "asa318n12": true,
		"docker0": false, "lo": false, "eth0": false, "asa318": false, "asset0": false, "br-5f1c": false} {
		if got := harnessInterface(name); got != want {
			t.Errorf("harnessInterface matches %q = %v, want %v", name, got, want)
		}
	}
}

func interfaces(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return names
}

// A daemon that stops answering without closing its connections (frozen here, cut off
// by a network elsewhere) loses its engine once its heartbeat goes unanswered.
func TestFrozenDaemonLosesItsEngine(t *testing.T) {
	ds := Start(t, 1)
	image := RefserveImage(t, ds...)
	rt := runtime.Docker{Host: ds[0].Host, Network: "host", Grace: 5 * time.Second, Heartbeat: 200 * time.Millisecond}
	inst, err := rt.Start(context.Background(), runtime.Launch{Name: "exp1-frozen-b0", Image: image,
		Command: []string{"refserve"}, LogPath: filepath.Join(t.TempDir(), "engine.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	WaitHealthy(t, inst)
	ds[0].Freeze()
	t.Cleanup(ds[0].Thaw) // before the engine's Stop, which asks the daemon
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the engine of a frozen daemon was not reported lost within 30s")
	}
	if e := inst.Exit(); e.Lost == "" || !strings.Contains(e.Lost, "pings in a row went unanswered") {
		t.Errorf("exit = %+v, want lost after unanswered pings", e)
	}
}

// A tcp:// daemon with --tlsverify is reached with the node's TLS files, and refused
// without them.
func TestTLSDaemon(t *testing.T) {
	d := StartTLS(t)
	image := RefserveImage(t, d)
	rt := runtime.Docker{Host: d.TLSHost, TLSCA: d.CA, TLSCert: d.Cert, TLSKey: d.Key, Network: "host", Grace: 5 * time.Second}
	inst, err := rt.Start(context.Background(), runtime.Launch{Name: "exp1-tls-b0", Image: image,
		Command: []string{"refserve"}, LogPath: filepath.Join(t.TempDir(), "engine.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	WaitHealthy(t, inst)
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := (runtime.Docker{Host: d.TLSHost}).Check(context.Background(), "", false); err == nil {
		t.Error("the TLS daemon answered a client without certificates")
	}
}
