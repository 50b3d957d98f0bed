package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// DaemonCheck is what a daemon said when asked whether it can run arms.
type DaemonCheck struct {
	// Version is the daemon's version and API version ("20.10.24, API 1.41").
	Version string
	// Runtimes are the container runtimes the daemon offers (runc, nvidia, ...).
	Runtimes []string
}

// Check asks the daemon whether it can run containers of image: that it answers, that
// image is there (arbiter does not pull), and, when gpus is set, that it can give
// containers GPUs (an nvidia runtime or CDI devices). It starts nothing.
func (d Docker) Check(ctx context.Context, image string, gpus bool) (DaemonCheck, error) {
	var dc DaemonCheck
	cli, err := d.connect(ctx)
	if err != nil {
		return dc, err
	}
	defer cli.Close()
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return dc, fmt.Errorf("docker runtime: %s: info: %w", cli.DaemonHost(), err)
	}
	dc.Version = fmt.Sprintf("%s, API %s", info.Info.ServerVersion, cli.ClientVersion())
	for name := range info.Info.Runtimes {
		dc.Runtimes = append(dc.Runtimes, name)
	}
	slices.Sort(dc.Runtimes)
	if image != "" {
		if _, err := cli.ImageInspect(ctx, image); err != nil {
			if cerrdefs.IsNotFound(err) {
				return dc, fmt.Errorf("docker runtime: image %s is not on the daemon at %s (arbiter does not pull: pull or build it there, e.g. arbiter image build --host %s)",
					image, cli.DaemonHost(), cli.DaemonHost())
			}
			return dc, fmt.Errorf("docker runtime: %s: image %s: %w", cli.DaemonHost(), image, err)
		}
	}
	if gpus && !slices.Contains(dc.Runtimes, "nvidia") && len(info.Info.CDISpecDirs) == 0 {
		return dc, fmt.Errorf("docker runtime: the daemon at %s has no nvidia runtime (runtimes: %s): it cannot give containers GPUs; install the NVIDIA Container Toolkit there",
			cli.DaemonHost(), strings.Join(dc.Runtimes, ", "))
	}
	return dc, nil
}
