package runtime

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Leftover is a container arbiter started and has not removed: an experiment that was
// killed before it could tear its arm down leaves one behind. Experiment, Run and
// Database are the IDs its labels carry (LabelExperiment, LabelRun, LabelDatabase).
type Leftover struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Image      string    `json:"image"`
	State      string    `json:"state"`  // running, exited, created, ...
	Status     string    `json:"status"` // the daemon's words, e.g. "Exited (2) 3 minutes ago"
	Experiment string    `json:"experiment,omitempty"`
	Run        string    `json:"run,omitempty"`
	Database   string    `json:"database,omitempty"` // results database's id; empty from an older arbiter
	Created    time.Time `json:"created"`
}

// Leftovers lists the containers labelled arbiter.managed=1 on the daemon, running or
// not, oldest first; only those of one experiment when experiment is not empty.
func (d Docker) Leftovers(ctx context.Context, experiment string) ([]Leftover, error) {
	cli, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	filters := client.Filters{}.Add("label", LabelManaged+"=1")
	if experiment != "" {
		filters.Add("label", LabelExperiment+"="+experiment)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("docker runtime: list containers: %w", err)
	}
	out := make([]Leftover, 0, len(res.Items))
	for i := len(res.Items) - 1; i >= 0; i-- { // the daemon lists newest first
		c := res.Items[i]
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, Leftover{ID: c.ID, Name: name, Image: c.Image, State: string(c.State), Status: c.Status,
			Experiment: c.Labels[LabelExperiment], Run: c.Labels[LabelRun], Database: c.Labels[LabelDatabase],
			Created: time.Unix(c.Created, 0).UTC()})
	}
	return out, nil
}

// Remove removes one of arbiter's containers, killing it first if it runs, with its
// anonymous volumes. A container already gone is not an error; one without arbiter's
// label is refused.
func (d Docker) Remove(ctx context.Context, id string) error {
	cli, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("docker runtime: inspect %s: %w", id, err)
	case insp.Container.Config == nil || insp.Container.Config.Labels[LabelManaged] != "1":
		return fmt.Errorf("docker runtime: container %s is not arbiter's (no %s=1 label); not removing it", id, LabelManaged)
	}
	_, err = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker runtime: remove %s: %w", id, err)
	}
	return nil
}
