package arms

import (
	"strings"
	"testing"
)

func TestDockerNodeFields(t *testing.T) {
	src := strings.Replace(specWith(twoArms+`runtime:
  kind: docker
  nodes:
    - {name: a, host: "tcp://10.0.0.5:2376", ca: certs/ca.pem, cert: certs/cert.pem, key: certs/key.pem, publish: 10.0.0.5}
    - {name: b, host: "unix:///run/b.sock", network: host}
`), "preset: refserve", "preset: refserve\n  image: arbiter/refserve", 1)
	s := mustParse(t, src)
	a, b := s.Runtime.Nodes[0], s.Runtime.Nodes[1]
	if a.CA != "certs/ca.pem" || a.Cert != "certs/cert.pem" || a.Key != "certs/key.pem" || a.Publish != "10.0.0.5" || b.Network != "host" {
		t.Errorf("nodes = %+v, %+v", a, b)
	}
	cases := []struct{ from, to, want string }{
		{"cert: certs/cert.pem, ", "", "runtime.nodes.0: node a: TLS needs all three files"},
		{`host: "tcp://10.0.0.5:2376"`, `host: "unix:///run/a.sock"`, "runtime.nodes.0.host: node a: TLS files are for a tcp:// daemon"},
		{"publish: 10.0.0.5", "publish: node-a.example", "runtime.nodes.0.publish: publish \"node-a.example\" must be an IP address"},
		{"network: host", "network: overlay", "runtime.nodes.1.network: network \"overlay\""},
		{"kind: docker", "kind: process", "settings of a Docker node"},
	}
	for _, c := range cases {
		err := parseErr(t, strings.Replace(src, c.from, c.to, 1))
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("with %q: %v, want %q", c.to, err, c.want)
		}
	}
}

func TestExternalArmsNeedBaseURLs(t *testing.T) {
	arms := "arms:\n  control:   {env: {BF16_INDEX_K: \"0\"}, base_url: \"http://127.0.0.1:30000\"}\n" +
		"  treatment: {env: {BF16_INDEX_K: \"1\"}, base_url: \"http://127.0.0.1:30001/\"}\n"
	src := specWith(arms + "runtime: {kind: external}\n")
	s := mustParse(t, src)
	ex, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if ex[0].BaseURL != "http://127.0.0.1:30000" || ex[1].BaseURL != "http://127.0.0.1:30001/" {
		t.Errorf("base urls = %q, %q", ex[0].BaseURL, ex[1].BaseURL)
	}
	cases := []struct{ from, to, want string }{
		{`, base_url: "http://127.0.0.1:30001/"`, "", "spec.yaml:8:3: arms.treatment.base_url: the external runtime launches nothing"},
		{"kind: external", "kind: process", "arms.control.base_url: base_url is for arms that already run"},
		{"30001/", "30000", "arms.treatment.base_url: arms control and treatment share base_url"},
		{"http://127.0.0.1:30001/", "ftp://127.0.0.1:30001", "want http:// or https://"},
		{"http://127.0.0.1:30001/", "http://u:pw@127.0.0.1:30001", "no credentials"},
		{"runtime: {kind: external}", "runtime: {kind: external, nodes: [{name: a}]}", "leave runtime.nodes out"},
	}
	for _, c := range cases {
		err := parseErr(t, strings.Replace(src, c.from, c.to, 1))
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("with %q: %v, want %q", c.to, err, c.want)
		}
		if strings.Contains(err.Error(), ":pw@") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	factors := specWith("factors:\n  bf16: {env: BF16_INDEX_K, levels: [\"0\", \"1\"]}\nruntime: {kind: external}\n")
	if err := parseErr(t, factors); !strings.Contains(err.Error(), "list the arms explicitly") {
		t.Errorf("external with factors: %v", err)
	}
}
