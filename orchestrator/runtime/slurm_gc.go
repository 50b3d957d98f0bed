package runtime

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
)

// ErrNoSlurm reports a machine without the Slurm client commands: no job of arbiter's can
// be found from it.
var ErrNoSlurm = errors.New("no Slurm cluster configured here (no squeue, or no slurm.conf)")

// SlurmLeftovers lists the jobs arbiter submitted for the results database databaseID
// that Slurm still holds (queued or running), found by their comment (SlurmComment); only
// those of one experiment when experiment is not empty. Every user's jobs are looked at,
// but only jobs of this database are returned.
func SlurmLeftovers(ctx context.Context, databaseID, experiment string) ([]Leftover, error) {
	if _, err := exec.LookPath("squeue"); err != nil {
		return nil, ErrNoSlurm
	}
	out, err := slurmCommand(ctx, nil, nil, "squeue", "-h", "-t", "PENDING,RUNNING,SUSPENDED,CONFIGURING,COMPLETING,REQUEUED,RESIZING",
		"-o", "%i|%T|%k|%j")
	if err != nil {
		if strings.Contains(err.Error(), "fetch_config") {
			// The client commands are installed, but no cluster is configured here
			// (no slurm.conf, no configless DNS record): no job can be ours.
			return nil, ErrNoSlurm
		}
		return nil, err
	}
	var left []Leftover
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), "|", 4)
		if len(f) != 4 || !strings.HasPrefix(f[3], SlurmJobPrefix) {
			continue
		}
		db, exp, run, ok := ParseSlurmComment(f[2])
		if !ok || db != databaseID {
			continue
		}
		l := Leftover{ID: f[0], Name: f[3], State: strings.ToLower(f[1]), Status: f[1], Database: db,
			Experiment: strconv.FormatInt(exp, 10)}
		if run != 0 {
			l.Run = strconv.FormatInt(run, 10)
		}
		if experiment != "" && l.Experiment != experiment {
			continue
		}
		left = append(left, l)
	}
	return left, nil
}

// CancelSlurmJob cancels one job (scancel).
func CancelSlurmJob(ctx context.Context, id string) error {
	_, err := slurmCommand(ctx, nil, nil, "scancel", id)
	return err
}
