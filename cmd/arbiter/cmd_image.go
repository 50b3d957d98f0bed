package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

func init() { subcommands = append(subcommands, newImageCmd) }

// DefaultImage is the tag `arbiter image build` gives the refserve image.
const DefaultImage = "arbiter/refserve:latest"

// refserveInImage is where the engine lies in the image: on the default PATH, so that
// the refserve preset's command (refserve) finds it.
const refserveInImage = "/usr/local/bin/refserve"

type imageBuildOptions struct {
	binary string
	tag    string
	hosts  []string
	spec   string
}

func newImageCmd(g *globals) *cobra.Command {
	img := commandGroup("image", "Build the images the docker runtime runs")
	var o imageBuildOptions
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the refserve image FROM scratch on one or more Docker daemons, without a registry",
		Long: `Build an image that holds nothing but refserve, FROM scratch, directly on each daemon
through the Engine API: no registry, no pull, no Dockerfile of yours. The binary is
bin/refserve beside arbiter unless --binary says otherwise; build it static
(make image does: CGO_ENABLED=0, -tags arbiter_static) so that it needs no loader. A
dynamically linked binary is taken with its loader and shared libraries.

The daemons are --host (repeatable), the docker nodes of --spec, or the local daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return imageBuild(cmd.Context(), g, o)
		},
	}
	build.Flags().StringVar(&o.binary, "binary", "", "the refserve binary to put in the image (default: refserve beside this arbiter)")
	build.Flags().StringVar(&o.tag, "tag", DefaultImage, "the image's tag")
	build.Flags().StringArrayVar(&o.hosts, "host", nil, "a Docker daemon to build on: unix://, tcp:// or ssh:// (repeatable)")
	build.Flags().StringVar(&o.spec, "spec", "", "build on every node of this spec's docker runtime, with the nodes' TLS files")
	img.AddCommand(build)
	return img
}

func imageBuild(ctx context.Context, g *globals, o imageBuildOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	bin := o.binary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("image build: cannot find refserve beside arbiter (%v); give --binary", err))
		}
		bin = filepath.Join(filepath.Dir(self), "refserve")
	}
	files, err := runtime.ExecutableFiles(bin, refserveInImage)
	if err != nil {
		return withCode(exitUsage, fmt.Errorf("image build: %w (build it with make image, or give --binary)", err))
	}
	if len(files) > 1 {
		fmt.Fprintf(g.stderr, "arbiter image build: %s is dynamically linked; its loader and %d shared libraries go in with it (a static build needs none: make image)\n", bin, len(files)-2)
	}
	type node struct {
		name string
		d    runtime.Docker
	}
	var nodes []node
	for _, h := range o.hosts {
		nodes = append(nodes, node{h, runtime.Docker{Host: h}})
	}
	if o.spec != "" {
		spec, err := arms.Load(o.spec)
		if err != nil {
			return withCode(exitUsage, err)
		}
		if spec.Runtime.Kind != arms.RuntimeDocker {
			return withCode(exitUsage, fmt.Errorf("image build: %s runs on the %s runtime, not docker", o.spec, spec.Runtime.Kind))
		}
		for _, n := range spec.Nodes() {
			nodes = append(nodes, node{n.Name, orchestrator.DockerFor(spec, n)})
		}
	}
	if len(nodes) == 0 {
		nodes = []node{{"local daemon", runtime.Docker{}}}
	}
	var errs []error
	for _, n := range nodes {
		start := time.Now()
		if err := n.d.BuildImage(ctx, o.tag, files, refserveInImage); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
			continue
		}
		fmt.Fprintf(g.stdout, "%s: built %s from %s in %s\n", n.name, o.tag, bin, time.Since(start).Round(time.Millisecond))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(nodes) == 1 && o.spec == "" {
		fmt.Fprintf(g.stdout, "use it with: engine: {preset: refserve, image: %s} and runtime: {kind: docker}\n", strings.TrimSuffix(o.tag, ":latest"))
	}
	return nil
}
