package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newOwner(id string) Owner {
	o := ThisProcess()
	o.ID = id
	return o
}

func TestLeaseIsExclusiveUntilItExpires(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	t0 := time.Now()
	exp, first, err := s.StartExperiment(ctx, Experiment{Name: "e", Created: t0}, newOwner("first"))
	if err != nil {
		t.Fatal(err)
	}

	// A second arbiter is refused while the first one's heartbeat is fresh, and told who
	// holds the experiment.
	_, err = s.AcquireLease(ctx, exp, newOwner("second"), t0.Add(LeaseExpiry/2))
	var held *LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("second owner while the first is live: %v, want a LeaseHeldError", err)
	}
	for _, want := range []string{fmt.Sprintf("experiment %d is being run by arbiter pid %d", exp, os.Getpid()),
		"owner first", "since ", "last heartbeat 15s ago"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}

	// A heartbeat keeps it: the same refusal a whole expiry after the start.
	if err := first.Renew(ctx, t0.Add(LeaseExpiry/2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, exp, newOwner("second"), t0.Add(LeaseExpiry)); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("after a heartbeat: %v, want ErrLeaseHeld", err)
	}

	// Without heartbeats for LeaseExpiry the lease is stale: the experiment is shown
	// abandoned and the second arbiter takes it over.
	late := t0.Add(LeaseExpiry/2 + LeaseExpiry)
	second, err := s.AcquireLease(ctx, exp, newOwner("second"), late)
	if err != nil {
		t.Fatalf("taking over a stale lease: %v", err)
	}
	// The first one learns it at its next heartbeat, and cannot finish the experiment.
	if err := first.Renew(ctx, late); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("old owner's heartbeat: %v, want ErrLeaseLost", err)
	}
	if err := first.Finish(ctx, ExperimentInterrupted, "", late); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("old owner's finish: %v, want ErrLeaseLost", err)
	}
	e, err := FindExperiment(ctx, s.DB(), fmt.Sprint(exp))
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != ExperimentRunning || e.Lease == nil || e.Lease.Owner != "second" {
		t.Fatalf("after the takeover: status %s, lease %+v; want running, owned by second", e.Status, e.Lease)
	}
	// The new owner finishes it, which releases the lease.
	if err := second.Finish(ctx, ExperimentDone, "", late); err != nil {
		t.Fatal(err)
	}
	e, _ = FindExperiment(ctx, s.DB(), fmt.Sprint(exp))
	if e.Status != ExperimentDone || e.Lease != nil || e.Abandoned || e.State() != ExperimentDone {
		t.Fatalf("finished: %+v", e)
	}
	// A finished experiment's lease is free again (resume decides what to do with it).
	l, err := s.AcquireLease(ctx, exp, newOwner("third"), late)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseOfADeadProcessOnThisHostIsStaleAtOnce(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	// A real process that has exited (and been reaped): its pid names nobody.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := newOwner("killed")
	dead.PID = cmd.ProcessState.Pid()
	exp, _, err := s.StartExperiment(ctx, Experiment{Name: "e", Created: time.Now()}, dead)
	if err != nil {
		t.Fatal(err)
	}
	if pidNamespace() == "host" {
		t.Skip("no PID namespaces here: the lease waits for its expiry")
	}
	e, _ := FindExperiment(ctx, s.DB(), fmt.Sprint(exp))
	if !e.Abandoned || e.State() != ExperimentAbandoned {
		t.Fatalf("experiment of a dead process: abandoned %v, state %s", e.Abandoned, e.State())
	}
	list, err := ListExperiments(ctx, s.DB())
	if err != nil || len(list) != 1 || list[0].Status != ExperimentAbandoned || list[0].Lease == nil || list[0].Lease.Owner != "killed" {
		t.Fatalf("ls: %+v, %v; want abandoned with the dead owner's lease", list, err)
	}
	if _, err := s.AcquireLease(ctx, exp, newOwner("resumer"), time.Now()); err != nil {
		t.Fatalf("resume of a dead process's experiment: %v", err)
	}

	// The same lease seen from another host proves nothing about the process: its
	// heartbeat decides.
	far := LeaseRow{Owner: "x", Host: "another-host", PID: dead.PID, PIDNamespace: dead.PIDNamespace,
		HeartbeatAt: Timestamp(time.Now())}
	if !far.Live(time.Now()) {
		t.Error("a fresh lease of another host judged by a local pid")
	}
}

func TestRunningExperimentWithoutLeaseIsAbandoned(t *testing.T) {
	// An experiment recorded by an arbiter before leases existed, or one whose row says
	// running with no owner at all.
	s := newStore(t, Options{})
	ctx := context.Background()
	exp, err := s.CreateExperiment(ctx, Experiment{Name: "old", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := FindExperiment(ctx, s.DB(), fmt.Sprint(exp))
	if !e.Abandoned || e.Lease != nil {
		t.Fatalf("running without a lease: %+v", e)
	}
}

// TestLeaseRaceAcrossProcesses makes several real processes race for one abandoned
// experiment's lease on one file: exactly one may win.
func TestLeaseRaceAcrossProcesses(t *testing.T) {
	if os.Getenv("ARBITER_LEASE_RACER") != "" {
		return // a racer process runs leaseRacer from TestMain
	}
	path := filepath.Join(t.TempDir(), "race.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stale := newOwner("gone")
	stale.Host = "a-host-that-is-gone"
	exp, l, err := s.StartExperiment(ctx, Experiment{Name: "e", Created: time.Now()}, stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, time.Now().Add(-2*LeaseExpiry)); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Each racer stays alive until every one has answered: a winner that exited would
	// leave a lease of a dead process, which the next racer may rightly take.
	const racers = 8
	type racer struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	rs := make([]racer, racers)
	for i := range rs {
		c := exec.Command(os.Args[0], "-test.run", "^TestLeaseRaceAcrossProcesses$")
		c.Env = append(os.Environ(), "ARBITER_LEASE_RACER="+path, "ARBITER_LEASE_EXP="+strconv.FormatInt(exp, 10),
			"ARBITER_LEASE_OWNER="+fmt.Sprint("racer", i))
		c.Stderr = os.Stderr
		stdin, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = racer{cmd: c, stdin: stdin, out: bufio.NewReader(stdout)}
	}
	for _, r := range rs {
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	won, refused := 0, 0
	for i, r := range rs {
		line, err := r.out.ReadString('\n')
		switch {
		case strings.HasPrefix(line, "LEASE WON"):
			won++
		case strings.HasPrefix(line, "LEASE HELD"):
			refused++
		default:
			t.Errorf("racer %d: %q, %v", i, line, err)
		}
	}
	for i, r := range rs {
		r.stdin.Close()
		if err := r.cmd.Wait(); err != nil {
			t.Errorf("racer %d: %v", i, err)
		}
	}
	if won != 1 || refused != racers-1 {
		t.Fatalf("%d racers won the lease and %d were refused; want exactly one winner", won, refused)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	e, err := FindExperiment(ctx, ro, fmt.Sprint(exp))
	if err != nil || e.Lease == nil || !strings.HasPrefix(e.Lease.Owner, "racer") {
		t.Fatalf("lease after the race: %+v, %v", e.Lease, err)
	}
}

// leaseRacer is one process of TestLeaseRaceAcrossProcesses: it tries once to take the
// experiment's lease and says how it went.
func leaseRacer() int {
	path := os.Getenv("ARBITER_LEASE_RACER")
	exp, _ := strconv.ParseInt(os.Getenv("ARBITER_LEASE_EXP"), 10, 64)
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer s.Close()
	_, err = s.AcquireLease(context.Background(), exp, newOwner(os.Getenv("ARBITER_LEASE_OWNER")), time.Now())
	switch {
	case err == nil:
		fmt.Println("LEASE WON")
	case errors.Is(err, ErrLeaseHeld):
		fmt.Println("LEASE HELD:", err)
	default:
		fmt.Println("error:", err)
		return 1
	}
	// Alive (and so holding what it won) until the test has heard every racer.
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func TestMain(m *testing.M) {
	if os.Getenv("ARBITER_LEASE_RACER") != "" {
		os.Exit(leaseRacer())
	}
	os.Exit(m.Run())
}
