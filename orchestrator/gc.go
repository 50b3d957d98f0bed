package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// What killed arbiters leave behind, and the rule that removes it: a leftover goes when
// its experiment is over or abandoned; one of an experiment an arbiter still runs stays,
// unless the sweep is forced, which kills it. What belongs to another results database,
// or carries no database label, is never touched.

// LeftoverKind is what a leftover is.
type LeftoverKind string

// Kinds of leftovers.
const (
	LeftoverContainer    LeftoverKind = "container"
	LeftoverProcessGroup LeftoverKind = "process group"
	LeftoverSlurmJob     LeftoverKind = "slurm job"
)

// GCAction is what a sweep does with one leftover.
type GCAction string

// Sweep actions.
const (
	GCRemove GCAction = "remove" // its experiment is over or abandoned
	GCKill   GCAction = "kill"   // its experiment is still running, and the sweep is forced
	GCLeave  GCAction = "leave"  // its experiment is still running
)

// GCEntry is one leftover of a results database and what the sweep did with it.
type GCEntry struct {
	Kind LeftoverKind `json:"kind"`
	// Node is the node whose daemon holds a container, when the sweep looked at a spec's
	// nodes.
	Node string `json:"node,omitempty"`
	runtime.Leftover
	// Processes is how many processes a leftover process group held.
	Processes int      `json:"processes,omitempty"`
	Action    GCAction `json:"action,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Removed   bool     `json:"removed"`
	Error     string   `json:"error,omitempty"`

	node int // index of the daemon holding a container
}

// GCNode is a Docker daemon a sweep looks at.
type GCNode struct {
	// Name is the node's name in a spec; empty for a daemon named otherwise.
	Name   string
	Docker runtime.Docker
}

// GCNodes are the daemons of the docker nodes of spec.
func GCNodes(spec *arms.Spec) ([]GCNode, error) {
	if spec.Runtime.Kind != arms.RuntimeDocker {
		return nil, fmt.Errorf("%s runs on the %s runtime, which has no containers", spec.Path, spec.Runtime.Kind)
	}
	var out []GCNode
	for _, n := range spec.Nodes() {
		out = append(out, GCNode{Name: n.Name, Docker: DockerFor(spec, n)})
	}
	return out, nil
}

// GCOptions says what a sweep looks at and how far it goes.
type GCOptions struct {
	// Experiment limits the sweep to one experiment's leftovers; 0 sweeps them all.
	Experiment int64
	// DryRun decides and lists without removing anything; Force kills the leftovers of
	// experiments still running.
	DryRun, Force bool
	// Nodes are the Docker daemons to look at. Ambient says the one daemon was not named
	// by the user ($DOCKER_HOST, else the local socket): when it does not answer, it
	// counts as unchecked only if the database's experiments used the docker runtime.
	Nodes   []GCNode
	Ambient bool
	// Killing, when set, is told of each leftover just before the sweep kills it.
	Killing func(GCEntry)
}

// GCResult is what a sweep found and did.
type GCResult struct {
	// Entries are this database's leftovers: engine process groups first, then Slurm
	// jobs, then containers.
	Entries []GCEntry
	// Unchecked are the places the sweep could not look (a daemon down, Slurm not
	// answering): what they hold is unknown.
	Unchecked []string
	// OtherDatabases and Unlabelled count the containers left alone: of other results
	// databases, and without a database label (an older arbiter's).
	OtherDatabases, Unlabelled int
	// NoDaemon is true when the ambient daemon did not answer and the database's
	// experiments never used the docker runtime: only processes and jobs were checked.
	NoDaemon bool
}

// GC sweeps the leftovers of the results database at dbPath: engine process groups
// whose arbiter is gone, Slurm jobs Slurm still holds, and containers on o.Nodes. It
// returns what it found and did; its error joins every failure, an unchecked place
// among them, after the rest was swept. An error wrapping runtime.ErrBadHost is a
// daemon address that cannot be used, and nothing was swept.
func GC(ctx context.Context, dbPath string, o GCOptions) (GCResult, error) {
	var res GCResult
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		return res, err
	}
	defer db.Close()
	dbID, err := store.DatabaseID(ctx, db)
	if err != nil {
		return res, err
	}
	exps, err := store.ListExperiments(ctx, db)
	if err != nil {
		return res, err
	}
	byID := make(map[int64]store.ExperimentSummary, len(exps))
	for _, e := range exps {
		byID[e.ID] = e
	}
	expLabel := ""
	if o.Experiment != 0 {
		expLabel = strconv.FormatInt(o.Experiment, 10)
	}

	groups, groupErr := reapGroups(ctx, dbPath, o)
	var left []GCEntry
	for i, n := range o.Nodes {
		ls, err := n.Docker.Leftovers(ctx, expLabel)
		switch {
		case errors.Is(err, runtime.ErrBadHost):
			return res, errors.Join(groupErr, err)
		case err == nil:
		case o.Ambient && client.IsErrConnectionFailed(err):
			// Unless this database's experiments used the docker runtime, nothing of it
			// can be left on a daemon nobody named.
			used, uerr := store.RanOn(ctx, db, string(arms.RuntimeDocker))
			if uerr != nil || used {
				res.Unchecked = append(res.Unchecked, fmt.Sprintf("node %s: its Docker daemon (this database's experiments used the docker runtime): %v", n.label(), err))
			} else {
				res.NoDaemon = true
			}
		default:
			// One node down leaves the others to be swept.
			res.Unchecked = append(res.Unchecked, fmt.Sprintf("node %s: its Docker daemon: %v", n.label(), err))
		}
		for _, l := range ls {
			left = append(left, GCEntry{Kind: LeftoverContainer, Node: n.Name, Leftover: l, node: i})
		}
	}
	now := time.Now()
	var entries []GCEntry
	jobs, err := runtime.SlurmLeftovers(ctx, dbID, expLabel)
	switch {
	case errors.Is(err, runtime.ErrNoSlurm):
	case err != nil:
		res.Unchecked = append(res.Unchecked, fmt.Sprintf("Slurm jobs: %v", err))
	}
	for _, l := range jobs {
		entries = append(entries, decide(GCEntry{Kind: LeftoverSlurmJob, Leftover: l}, byID, o.Force, now))
	}
	for _, e := range left {
		switch e.Database {
		case dbID:
			entries = append(entries, decide(e, byID, o.Force, now))
		case "":
			res.Unlabelled++
		default:
			res.OtherDatabases++
		}
	}
	if !o.DryRun && o.Killing != nil {
		// Say what is about to be killed before killing it.
		for _, e := range entries {
			if e.Action == GCKill {
				o.Killing(e)
			}
		}
	}
	errs := []error{groupErr}
	if len(res.Unchecked) > 0 {
		errs = append(errs, fmt.Errorf("gc could not check %s", strings.Join(res.Unchecked, "; ")))
	}
	for i := range entries {
		e := &entries[i]
		if o.DryRun || e.Action == GCLeave {
			continue
		}
		var err error
		if e.Kind == LeftoverSlurmJob {
			err = runtime.CancelSlurmJob(ctx, e.ID)
		} else {
			err = o.Nodes[e.node].Docker.Remove(ctx, e.ID)
		}
		if err != nil {
			e.Error = err.Error()
			errs = append(errs, err)
			continue
		}
		e.Removed = true
	}
	res.Entries = append(groups, entries...)
	return res, errors.Join(errs...)
}

// decide says what the sweep does with one leftover of this database, and why: by the
// state of its experiment.
func decide(e GCEntry, byID map[int64]store.ExperimentSummary, force bool, now time.Time) GCEntry {
	e.Action = GCRemove
	id, err := strconv.ParseInt(e.Experiment, 10, 64)
	exp, known := byID[id]
	switch {
	case err != nil || !known:
		e.Reason = fmt.Sprintf("experiment %s is not in this database", e.Experiment)
	case exp.Status == store.ExperimentRunning && exp.Lease != nil:
		e.Action = GCLeave
		if force {
			e.Action = GCKill
		}
		e.Reason = fmt.Sprintf("experiment %s is still running: %s", e.Experiment, exp.Lease.Describe(now))
	case exp.Status == store.ExperimentAbandoned:
		e.Reason = fmt.Sprintf("experiment %s was abandoned (no lease renewed within %s)", e.Experiment, store.LeaseExpiry)
	default:
		e.Reason = fmt.Sprintf("experiment %s is %s", e.Experiment, exp.Status)
	}
	return e
}

// reapGroups ends (or, in a dry run, lists) the engine process groups recorded in the
// database whose arbiter is gone.
func reapGroups(ctx context.Context, dbPath string, o GCOptions) ([]GCEntry, error) {
	st, err := store.Open(dbPath, store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	orphans, err := ReapOrphans(ctx, st, o.Experiment, o.DryRun)
	var out []GCEntry
	errs := []error{err}
	for _, r := range orphans {
		e := GCEntry{Kind: LeftoverProcessGroup, Processes: r.Processes, Removed: r.Ended, Error: r.Err,
			Leftover: runtime.Leftover{ID: strconv.Itoa(r.PGID), Name: fmt.Sprintf("engine process group %d", r.PGID),
				State: "running", Experiment: strconv.FormatInt(r.ExperimentID, 10), Run: strconv.FormatInt(r.RunID, 10)}}
		if r.Err != "" {
			errs = append(errs, fmt.Errorf("%s: %s", e.Name, r.Err))
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// label names the node in what gc says: its name in the spec, else its daemon.
func (n GCNode) label() string {
	switch {
	case n.Name != "":
		return n.Name
	case n.Docker.Host != "":
		return n.Docker.Host
	case os.Getenv("DOCKER_HOST") != "":
		return os.Getenv("DOCKER_HOST") + " ($DOCKER_HOST)"
	}
	return "local"
}
