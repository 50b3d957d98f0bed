package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

func init() { subcommands = append(subcommands, newGcCmd) }

type gcOptions struct {
	dryRun     bool
	force      bool
	host       string
	spec       string
	experiment string
}

// What gc does with one container.
const (
	gcRemove = "remove" // its experiment is over or abandoned
	gcKill   = "kill"   // its experiment is still running, and --force was given
	gcLeave  = "leave"  // its experiment is still running
)

// gcEntry is one leftover of this database, a container or an engine process group, as
// gc reports it.
type gcEntry struct {
	// Kind is "container" or "process group".
	Kind string `json:"kind"`
	// Node is the node whose daemon holds a container, with --spec.
	Node string `json:"node,omitempty"`
	runtime.Leftover
	// Processes is how many processes a leftover process group held.
	Processes int    `json:"processes,omitempty"`
	Action    string `json:"action,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Removed   bool   `json:"removed"`
	Error     string `json:"error,omitempty"`
}

func newGcCmd(g *globals) *cobra.Command {
	var o gcOptions
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove the containers, engine processes and Slurm jobs that killed arbiters left behind",
		Long: `Remove the containers the docker runtime started for this results database's experiments
and never removed: an arbiter killed with SIGKILL, or a daemon that failed to remove a
container, leaves them behind. Only containers labelled with this database's id
(arbiter.database) are considered, and of those only the ones whose experiment is over or
abandoned (no arbiter renewed its lease within the last 30s); a container of an experiment
that an arbiter is still running is left alone and listed, unless --force is given, which
kills it (and so that experiment's running arm) after saying which. Containers of other
databases are never touched. Engine logs stay where they are.

Also end the engine process groups of the process runtime, recorded in the database, whose
arbiter no longer runs and whose supervisor did not end them (SIGTERM, then SIGKILL after
10s). Processes are checked on Linux only.

Also cancel the Slurm jobs of the slurm runtime that Slurm still holds (queued or running)
for this database's experiments, found by their comment (arbiter:db=ID,exp=N,run=M) on the
cluster the Slurm commands here talk to ($SLURM_CONF), by the same rule as containers.

A daemon that does not answer (or Slurm's commands failing) is listed as not checked, and
gc exits 1 after sweeping the rest: what it holds is unknown.`,
		Example: `  arbiter gc --dry-run                  # list what would go
  arbiter gc --experiment 12            # only experiment 12's
  arbiter gc --db results.db --host tcp://127.0.0.1:2375 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return gc(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list the containers and what gc would do, without removing any")
	cmd.Flags().BoolVar(&o.force, "force", false, "also kill the containers of experiments an arbiter is still running")
	cmd.Flags().StringVar(&o.experiment, "experiment", "", "only the containers of this experiment ID")
	cmd.Flags().StringVar(&o.host, "host", "", "Docker daemon, unix://, tcp:// or ssh:// (default $DOCKER_HOST, else the local socket)")
	cmd.Flags().StringVar(&o.spec, "spec", "", "look on every node of this spec's docker runtime (with the nodes' TLS files) instead of one daemon")
	return addDBFlag(cmd, g)
}

func gc(ctx context.Context, g *globals, o gcOptions) error {
	if o.experiment != "" {
		if id, err := strconv.ParseInt(o.experiment, 10, 64); err != nil || id < 1 {
			return withCode(exitUsage, fmt.Errorf("gc: --experiment %q: an experiment's id is a positive number, as `arbiter ls` lists them", o.experiment))
		}
	}
	path := g.dbPath()
	if _, err := os.Stat(path); err != nil {
		return withCode(exitUsage, fmt.Errorf("gc: no results database at %s: gc removes only the containers of one database's experiments, known by its id; give --db or set $ARBITER_DB (%w)", path, err))
	}
	db, err := store.OpenReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	dbID, err := store.DatabaseID(ctx, db)
	if err != nil {
		return err
	}
	exps, err := store.ListExperiments(ctx, db)
	if err != nil {
		return err
	}
	byID := make(map[string]store.ExperimentSummary, len(exps))
	for _, e := range exps {
		byID[fmt.Sprint(e.ID)] = e
	}

	groups, groupErr := gcEngineGroups(ctx, g, o)
	nodes := []gcNode{{d: runtime.Docker{Host: o.host}}}
	if o.spec != "" {
		if nodes, err = specNodes(o.spec); err != nil {
			return errors.Join(groupErr, err)
		}
	}
	type found struct {
		runtime.Leftover
		node int
	}
	var left []found
	// unchecked are the places gc could not look (a daemon down, Slurm not answering):
	// what they hold is unknown, so gc does not say there is nothing left, and fails.
	var unchecked []string
	for i, n := range nodes {
		ls, err := n.d.Leftovers(ctx, o.experiment)
		switch {
		case errors.Is(err, runtime.ErrBadHost):
			return withCode(exitUsage, err)
		case err == nil:
		case o.host == "" && o.spec == "" && client.IsErrConnectionFailed(err):
			// No daemon named on the command line, and the ambient one ($DOCKER_HOST,
			// else the local socket) does not answer: unless this database's
			// experiments used the docker runtime, nothing of it can be left.
			used, uerr := store.RanOn(ctx, db, "docker")
			if uerr != nil || used {
				unchecked = append(unchecked, fmt.Sprintf("node %s: its Docker daemon (this database's experiments used the docker runtime): %v", n.label(o.host), err))
			} else {
				fmt.Fprintln(g.stderr, "arbiter gc: no Docker daemon answers; only engine processes and Slurm jobs were checked")
			}
		default:
			// One node down leaves the others to be swept.
			unchecked = append(unchecked, fmt.Sprintf("node %s: its Docker daemon: %v", n.label(o.host), err))
		}
		for _, l := range ls {
			left = append(left, found{l, i})
		}
	}
	var entries []gcEntry
	var entryNode []int
	others, unlabelled := 0, 0
	now := time.Now()
	jobs, err := runtime.SlurmLeftovers(ctx, dbID, o.experiment)
	switch {
	case errors.Is(err, runtime.ErrNoSlurm):
	case err != nil:
		unchecked = append(unchecked, fmt.Sprintf("Slurm jobs: %v", err))
	}
	for _, l := range jobs {
		entries = append(entries, gcDecide(gcEntry{Kind: "slurm job", Leftover: l, Action: gcRemove}, byID, o, now))
		entryNode = append(entryNode, -1)
	}
	for _, f := range left {
		l := f.Leftover
		switch l.Database {
		case dbID:
		case "":
			unlabelled++
			continue
		default:
			others++
			continue
		}
		entries = append(entries, gcDecide(gcEntry{Kind: "container", Node: nodes[f.node].name, Leftover: l, Action: gcRemove}, byID, o, now))
		entryNode = append(entryNode, f.node)
	}
	if others+unlabelled > 0 {
		fmt.Fprintf(g.stderr, "arbiter gc: left alone: %d container(s) of other results databases and %d without a database label (an older arbiter's; docker ps -a --filter label=%s=1 lists them)\n",
			others, unlabelled, runtime.LabelManaged)
	}
	if !o.dryRun {
		// Say what is about to be killed before killing it.
		for _, e := range entries {
			if e.Action == gcKill {
				fmt.Fprintf(g.stderr, "arbiter gc --force: killing %s (%s): %s\n", e.Name, e.State, e.Reason)
			}
		}
	}
	errs := []error{groupErr}
	if len(unchecked) > 0 {
		errs = append(errs, fmt.Errorf("gc could not check %s", strings.Join(unchecked, "; ")))
	}
	for i := range entries {
		e := &entries[i]
		if o.dryRun || e.Action == gcLeave {
			continue
		}
		var err error
		if e.Kind == "slurm job" {
			err = runtime.CancelSlurmJob(ctx, e.ID)
		} else {
			err = nodes[entryNode[i]].d.Remove(ctx, e.ID)
		}
		if err != nil {
			e.Error = err.Error()
			errs = append(errs, err)
			continue
		}
		e.Removed = true
	}
	entries = append(groups, entries...)
	if g.json {
		if entries == nil {
			entries = []gcEntry{}
		}
		if err := json.NewEncoder(g.stdout).Encode(entries); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	switch {
	case len(entries) == 0 && len(unchecked) == 0:
		fmt.Fprintln(g.stdout, "no leftover containers, engine processes or Slurm jobs")
	case len(entries) == 0:
		fmt.Fprintln(g.stdout, "no leftover found where gc could look")
	}
	for _, u := range unchecked {
		fmt.Fprintf(g.stdout, "not checked: %s\n", u)
	}
	for _, e := range entries {
		switch e.Kind {
		case "process group":
			printGroup(g, o, e)
			continue
		case "slurm job":
			printJob(g, o, e)
			continue
		}
		verb := gcVerb(o, e, "remove", "removed")
		if e.Action == gcKill {
			verb = gcVerb(o, e, "kill", "killed")
		}
		fmt.Fprintf(g.stdout, "%s %s (%s", verb, e.Name, e.State)
		if e.Node != "" {
			fmt.Fprintf(g.stdout, ", node %s", e.Node)
		}
		if e.Run != "" {
			fmt.Fprintf(g.stdout, ", run %s", e.Run)
		}
		fmt.Fprintf(g.stdout, ", image %s): %s", e.Image, e.Reason)
		if e.Action == gcLeave {
			fmt.Fprint(g.stdout, "; --force kills it")
		}
		if e.Error != "" {
			fmt.Fprintf(g.stdout, ": %s", e.Error)
		}
		fmt.Fprintln(g.stdout)
	}
	return errors.Join(errs...)
}

// gcDecide says what gc does with one leftover of this database, and why: by the state
// of its experiment.
func gcDecide(e gcEntry, byID map[string]store.ExperimentSummary, o gcOptions, now time.Time) gcEntry {
	exp, known := byID[e.Experiment]
	switch {
	case !known:
		e.Reason = fmt.Sprintf("experiment %s is not in this database", e.Experiment)
	case exp.Status == store.ExperimentRunning && exp.Lease != nil:
		e.Action = gcLeave
		if o.force {
			e.Action = gcKill
		}
		e.Reason = fmt.Sprintf("experiment %s is still running: %s", e.Experiment, exp.Lease.Describe(now))
	case exp.Status == store.ExperimentAbandoned:
		e.Reason = fmt.Sprintf("experiment %s was abandoned (no lease renewed within %s)", e.Experiment, store.LeaseExpiry)
	default:
		e.Reason = fmt.Sprintf("experiment %s is %s", e.Experiment, exp.Status)
	}
	return e
}

// gcVerb says what gc did, or would do with --dry-run, to a leftover whose removal is
// called do (done when done): left alone, done, or not done for an error.
func gcVerb(o gcOptions, e gcEntry, do, done string) string {
	switch {
	case e.Action == gcLeave && o.dryRun:
		return "would leave"
	case e.Action == gcLeave:
		return "left"
	case o.dryRun:
		return "would " + do
	case !e.Removed:
		return "could not " + do
	}
	return done
}

func printJob(g *globals, o gcOptions, e gcEntry) {
	verb := gcVerb(o, e, "cancel", "cancelled")
	fmt.Fprintf(g.stdout, "%s Slurm job %s (%s, %s", verb, e.ID, e.Name, e.State)
	if e.Run != "" {
		fmt.Fprintf(g.stdout, ", run %s", e.Run)
	}
	fmt.Fprintf(g.stdout, "): %s", e.Reason)
	if e.Action == gcLeave {
		fmt.Fprint(g.stdout, "; --force cancels it")
	}
	if e.Error != "" {
		fmt.Fprintf(g.stdout, ": %s", e.Error)
	}
	fmt.Fprintln(g.stdout)
}

// gcNode is one daemon gc looks at: a node of a spec, or the one of --host.
type gcNode struct {
	name string
	d    runtime.Docker
}

// label names the node in what gc prints: its name in the spec, else its daemon.
func (n gcNode) label(host string) string {
	switch {
	case n.name != "":
		return n.name
	case host != "":
		return host
	case os.Getenv("DOCKER_HOST") != "":
		return os.Getenv("DOCKER_HOST") + " ($DOCKER_HOST)"
	}
	return "local"
}

// specNodes are the daemons of the docker nodes of the spec at path.
func specNodes(path string) ([]gcNode, error) {
	spec, err := arms.Load(path)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	if spec.Runtime.Kind != "docker" {
		return nil, withCode(exitUsage, fmt.Errorf("gc --spec: %s runs on the %s runtime, which has no containers", path, spec.Runtime.Kind))
	}
	var out []gcNode
	for _, n := range spec.Nodes() {
		out = append(out, gcNode{name: n.Name, d: orchestrator.DockerFor(spec, n)})
	}
	return out, nil
}
