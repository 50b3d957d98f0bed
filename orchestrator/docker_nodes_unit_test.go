package orchestrator

import (
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

func TestDockerForReadsTLSFilesBesideTheSpec(t *testing.T) {
	t.Parallel()
	src := `version: 1
name: tls
engine: {preset: refserve, image: arbiter/refserve}
arms:
  control: {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {sessions: 2, rounds: 1}
runtime:
  kind: docker
  nodes:
    - {name: a, host: "tcp://10.0.0.5:2376", ca: tls/ca.pem, cert: /etc/arbiter/cert.pem, key: tls/key.pem, publish: 10.0.0.5, network: host}
    - {name: b}
`
	spec, err := arms.Parse(filepath.Join("/specs", "exp.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := DockerFor(spec, spec.Runtime.Nodes[0])
	if a.Host != "tcp://10.0.0.5:2376" || a.TLSCA != "/specs/tls/ca.pem" || a.TLSCert != "/etc/arbiter/cert.pem" ||
		a.TLSKey != "/specs/tls/key.pem" || a.PublishIP != "10.0.0.5" || a.Network != "host" {
		t.Errorf("node a: %+v", a)
	}
	if b := DockerFor(spec, spec.Runtime.Nodes[1]); b.Host != "" || b.TLSCA != "" || b.Network != "" {
		t.Errorf("node b (the local daemon): %+v", b)
	}
}
