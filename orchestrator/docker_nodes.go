package orchestrator

import (
	"path/filepath"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// DockerFor is the docker runtime of one node of spec: the node's daemon (its host, or
// the local daemon when empty or "local") with its TLS files, where its engines listen
// (publish) and on which network, and the engine's mounts. A slot's devices come with
// each launch; the node's own list ("all", or none) applies to launches without one.
func DockerFor(spec *arms.Spec, node arms.Node) runtime.Docker {
	d := runtime.Docker{Mounts: spec.Engine.Mounts, GPUs: node.GPUs, PublishIP: node.Publish, Network: node.Network}
	if !arms.IsLocalHost(node.Host) {
		d.Host = node.Host
	}
	// TLS files written relative to the spec are read from its folder, wherever
	// arbiter was started.
	d.TLSCA, d.TLSCert, d.TLSKey = specRelative(spec, node.CA), specRelative(spec, node.Cert), specRelative(spec, node.Key)
	return d
}

func specRelative(spec *arms.Spec, path string) string {
	if path == "" || filepath.IsAbs(path) || spec.Path == "" {
		return path
	}
	return filepath.Join(filepath.Dir(spec.Path), path)
}
