package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/slurmtest"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

// slurmCluster starts a real cluster and points the Slurm commands of this test at it.
func slurmCluster(t *testing.T) *slurmtest.Cluster {
	c := slurmtest.Start(t, slurmtest.Options{})
	t.Setenv("SLURM_CONF", c.Conf)
	return c
}

func refserveLaunch(t *testing.T, name string) Launch {
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	return Launch{Name: name, ExperimentID: 7, RunID: 3, DatabaseID: "0123456789abcdef",
		Command: []string{bin, "--enable-hierarchical-cache"}, Env: []string{"BF16_INDEX_K=1", "HF_TOKEN=hf_secretvalue"},
		LogPath: filepath.Join(t.TempDir(), name+".log"),
		Redact:  func(s string) string { return strings.ReplaceAll(s, "hf_secretvalue", "[redacted]") }}
}

// scancel cancels the job behind arbiter's back, as an administrator would, and waits for
// its instance to end.
func scancel(ctx context.Context, t *testing.T, c *slurmtest.Cluster, job string, inst Instance) {
	t.Helper()
	if _, err := c.Command(ctx, "scancel", job); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled job did not end")
	}
}

// TestSlurmJob runs refserve as a Slurm job on a real cluster: the job lands on a node
// with the GPU Slurm assigned, serves on that node's own address, carries its pins in
// the batch script Slurm keeps (its secret not), and a job cancelled by scancel is lost
// with Slurm's words while a stopped one is not.
func TestSlurmJob(t *testing.T) {
	c := slurmCluster(t)
	ctx := context.Background()
	s := Slurm{Partition: c.Partition, GPUs: 1, Poll: 100 * time.Millisecond}
	l := refserveLaunch(t, "exp7-treatment-b0")
	inst, err := s.Start(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	p := inst.(Placed).Placement()
	job := strings.TrimPrefix(p.Job, "slurm:")
	var node slurmtest.Node
	for _, n := range c.Nodes {
		if n.Name == p.Node {
			node = n
		}
	}
	if node.Name == "" || p.GPUs != "0" || p.Visible != "0" {
		t.Fatalf("placement %+v; want a node of the cluster, GPU index 0 and CUDA_VISIBLE_DEVICES=0", p)
	}
	if want := "http://" + node.Addr + ":"; !strings.HasPrefix(inst.Endpoint(), want) {
		t.Errorf("endpoint %s; want the node's own address %s", inst.Endpoint(), want)
	}
	waitHealthy(t, inst)

	script, err := c.Command(ctx, "scontrol", "write", "batch_script", job, "-")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "export BF16_INDEX_K='1'") || !strings.Contains(script, "'--enable-hierarchical-cache'") {
		t.Errorf("batch script lacks the pins:\n%s", script)
	}
	if strings.Contains(script, "hf_secretvalue") || strings.Contains(script, "HF_TOKEN") {
		t.Errorf("batch script carries the secret:\n%s", script)
	}
	show, err := c.Command(ctx, "scontrol", "show", "job", "-d", job)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(show, "GRES=gpu:1(IDX:0)") || !strings.Contains(show, "Comment=arbiter:db=0123456789abcdef,exp=7,run=3") {
		t.Errorf("scontrol show job:\n%s", show)
	}
	left, err := SlurmLeftovers(ctx, "0123456789abcdef", "7")
	if err != nil || len(left) != 1 || left[0].ID != job || left[0].Run != "3" {
		t.Errorf("SlurmLeftovers = %+v, %v; want job %s of run 3", left, err, job)
	}
	if other, _ := SlurmLeftovers(ctx, "another-database", ""); len(other) != 0 {
		t.Errorf("another database's leftovers: %+v", other)
	}

	// Cancelled behind arbiter's back: lost, in Slurm's words.
	scancel(ctx, t, c, job, inst)
	x := inst.Exit()
	if x.Lost == "" || x.Stopped || !strings.Contains(x.String(), "CANCELLED") || !strings.Contains(x.String(), "job "+job) {
		t.Errorf("exit of a cancelled job: %+v (%s); want lost, in Slurm's words", x, x)
	}

	// Stopped by arbiter: neither lost nor crashed; the log is redacted.
	l2 := refserveLaunch(t, "exp7-control-b0")
	inst2, err := s.Start(ctx, l2)
	if err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, inst2)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := inst2.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if x := inst2.Exit(); x.Lost != "" || !x.Stopped || x.Crashed() {
		t.Errorf("exit of a stopped job: %+v", x)
	}
	if log, err := os.ReadFile(l2.LogPath); err != nil || !strings.Contains(string(log), "arbiter-slurm: job=") {
		t.Errorf("the job's output did not reach the launch's log: %q, %v", log, err)
	}
}

// TestSlurmErrors: the usual ways a job never runs each say so, in Slurm's words.
func TestSlurmErrors(t *testing.T) {
	c := slurmCluster(t)
	ctx := context.Background()
	l := refserveLaunch(t, "exp7-control-b0")

	_, err := Slurm{Partition: "nosuch"}.Start(ctx, l)
	if !errors.Is(err, ErrSlurmRejected) || !strings.Contains(err.Error(), `no such partition "nosuch"`) {
		t.Errorf("no such partition: %v", err)
	}
	_, err = Slurm{Partition: c.Partition, GPUs: 3}.Start(ctx, l)
	if !errors.Is(err, ErrSlurmRejected) || !strings.Contains(err.Error(), "Requested node configuration is not available") {
		t.Errorf("more GPUs than a node has: %v", err)
	}
	// A job held in the queue past its wait: given up with Slurm's reason, and cancelled.
	_, err = Slurm{Partition: c.Partition, Options: []string{"--begin=now+1hour"}, Pending: time.Second,
		Poll: 100 * time.Millisecond}.Start(ctx, l)
	if !errors.Is(err, ErrSlurmPending) || !strings.Contains(err.Error(), "Reason=BeginTime") {
		t.Errorf("pending job: %v", err)
	}
	if left, err := SlurmLeftovers(ctx, "0123456789abcdef", ""); err != nil || len(left) != 0 {
		t.Errorf("a job given up on is still queued: %+v, %v", left, err)
	}
}

func TestParseSlurmJob(t *testing.T) {
	j := parseSlurmJob("JobId=12 JobName=arbiter-x JobState=RUNNING Reason=None BatchHost=n2 Comment=arbiter:db=ab,exp=3,run=9 Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1) ExitCode=0:15")
	if j["JobState"] != "RUNNING" || j["BatchHost"] != "n2" || j.gpuIndices() != "0,1" {
		t.Errorf("parsed %v, GPUs %q", j, j.gpuIndices())
	}
	if db, exp, run, ok := ParseSlurmComment(j["Comment"]); !ok || db != "ab" || exp != 3 || run != 9 {
		t.Errorf("comment: %q %d %d %v", db, exp, run, ok)
	}
	for _, c := range []string{"", "arbiter:", "arbiter:exp=3", "arbiter:db=x,exp=q", "other:db=x,exp=3"} {
		if _, _, _, ok := ParseSlurmComment(c); ok {
			t.Errorf("ParseSlurmComment(%q) accepted", c)
		}
	}
}

func FuzzParseSlurmJob(f *testing.F) {
	f.Add("JobId=12 JobState=RUNNING GRES=gpu:2(IDX:0-1) Comment=arbiter:db=ab,exp=3,run=9")
	f.Add("GRES=gpu:1(IDX:")
	f.Add("Comment=arbiter:db=,exp=-1 GRES=(IDX:9-0)")
	f.Fuzz(func(t *testing.T, line string) {
		j := parseSlurmJob(line)
		_ = j.gpuIndices()
		db, _, _, ok := ParseSlurmComment(j["Comment"])
		if ok && db == "" {
			t.Errorf("accepted a comment without a database: %q", j["Comment"])
		}
	})
}

// TestSlurmREST runs a job through slurmrestd instead of the commands: the same
// placement, the same lost job in Slurm's words, the same refusal of a bad partition.
func TestSlurmREST(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{REST: true})
	t.Setenv("SLURM_CONF", c.Conf) // for the test's own scancel only
	ctx := context.Background()
	s := Slurm{REST: c.RESTURL, Token: c.Token, User: "root", Partition: c.Partition, GPUs: 1, TimeLimit: "10:00",
		Poll: 100 * time.Millisecond}
	inst, err := s.Start(ctx, refserveLaunch(t, "exp7-treatment-b0"))
	if err != nil {
		t.Fatal(err)
	}
	p := inst.(Placed).Placement()
	if p.Node == "" || p.GPUs != "0" || p.Visible != "0" {
		t.Fatalf("placement %+v", p)
	}
	waitHealthy(t, inst)
	job := strings.TrimPrefix(p.Job, "slurm:")
	scancel(ctx, t, c, job, inst)
	if x := inst.Exit(); x.Lost == "" || !strings.Contains(x.Lost, "CANCELLED") {
		t.Errorf("exit of a cancelled job: %+v", x)
	}
	bad := s
	bad.Partition = "nosuch"
	if _, err := bad.Start(ctx, refserveLaunch(t, "exp7-control-b0")); !errors.Is(err, ErrSlurmRejected) || !strings.Contains(err.Error(), `no such partition "nosuch"`) {
		t.Errorf("no such partition through slurmrestd: %v", err)
	}
	wrong := s
	wrong.Token = "not-a-token"
	if _, err := wrong.Start(ctx, refserveLaunch(t, "exp7-control-b0")); err == nil || !strings.Contains(err.Error(), "SLURM_JWT") {
		t.Errorf("a bad token: %v", err)
	}
}

func TestSlurmMinutes(t *testing.T) {
	for in, want := range map[string]int{"90": 90, "1:30": 2, "1:30:00": 90, "2-12": 3600, "1-0:30": 1470, "0-0:0:1": 1, "UNLIMITED": 0} {
		if got, err := SlurmMinutes(in); err != nil || got != want {
			t.Errorf("SlurmMinutes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1:2:3:4", "-1", "1-2:3:4:5"} {
		if _, err := SlurmMinutes(in); err == nil {
			t.Errorf("SlurmMinutes(%q) accepted", in)
		}
	}
}

// How a job's end is recorded when arbiter stopped it: its own cancel (or a controller
// gone) is no loss, but an end Slurm caused before the stop found it (the node failed
// while the engine's last replies failed, before the next poll) is lost, as it is when
// the poll sees it first.
func TestAStoppedJobThatSlurmEndedFirstIsLost(t *testing.T) {
	for _, c := range []struct {
		state   string
		stopped bool
		lost    bool
	}{
		{"NODE_FAIL", true, true},
		{"NODE_FAIL", false, true},
		{"PREEMPTED", true, true},
		{"TIMEOUT", true, true},
		{"CANCELLED", true, false},
		{"CANCELLED", false, true},
		{"UNKNOWN", true, false},
		{"UNKNOWN", false, true},
		{"COMPLETED", true, false},
		{"FAILED", false, false},
	} {
		i := &slurmInstance{id: "42", raw: filepath.Join(t.TempDir(), "none"), logPath: filepath.Join(t.TempDir(), "l.log"),
			done: make(chan struct{}), placement: Placement{Node: "n1"}, stopped: c.stopped}
		i.record(slurmJob{"JobState": c.state, "Reason": "NodeDown", "ExitCode": "0:0"})
		x := i.Exit()
		if (x.Lost != "") != c.lost || x.Stopped != c.stopped || c.lost && !strings.Contains(x.Lost, "Slurm job 42 "+c.state+" on n1") {
			t.Errorf("%s, stopped %v: exit %+v; want lost %v", c.state, c.stopped, x, c.lost)
		}
	}
}

// A job that Slurm ends before it runs (its node failed, it was cancelled) loses its
// launch, which is run again; one that fails before it runs is a refusal.
func TestJobEndedBeforeItRan(t *testing.T) {
	for _, c := range []struct {
		line     string
		lost     bool
		contains string
	}{
		{"JobId=4 JobName=x JobState=NODE_FAIL Reason=NodeDown NodeList=n1", true, "Slurm job 4 NODE_FAIL before it ran: its node failed (n1); Reason=NodeDown"},
		{"JobId=5 JobName=x JobState=CANCELLED Reason=None NodeList=(null)", true, "Slurm job 5 CANCELLED before it ran: cancelled by a user or an administrator"},
		{"JobId=6 JobName=x JobState=FAILED Reason=NonZeroExitCode", false, "job 6 ended before it ran: FAILED (Reason=NonZeroExitCode)"},
	} {
		j := parseSlurmJob(c.line)
		err := endedBeforeRunning(j["JobId"], j, "")
		if c.lost != errors.Is(err, ErrNodeLost) || c.lost == errors.Is(err, ErrSlurmRejected) || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: %v; want lost %v, saying %q", c.line, err, c.lost, c.contains)
		}
	}
}
