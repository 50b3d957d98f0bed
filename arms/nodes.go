package arms

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// decodeNodeDocker reads the fields of a node that only the docker runtime uses: the
// daemon's TLS files, where engines listen, and their network.
func (d *decoder) decodeNodeDocker(g entry, n *Node, v string) {
	switch g.key {
	case "ca":
		n.CA = v
	case "cert":
		n.Cert = v
	case "key":
		n.Key = v
	case "publish":
		if _, err := netip.ParseAddr(v); err != nil {
			d.add(g.val, g.path, "publish %q must be an IP address of the node that this machine can reach", v)
		}
		n.Publish = v
	case "network":
		if v != "host" {
			d.add(g.val, g.path, "network %q: write host for the node's own network, or leave it out for the daemon's bridge", v)
		}
		n.Network = v
	}
}

// decodeArm reads one explicit arm: its pins and, for an arm that already runs, its
// base_url.
func (d *decoder) decodeArm(a entry) ArmSpec {
	arm := ArmSpec{Name: a.key}
	arm.Pins = d.decodePinsAnd(a, []string{"base_url"}, func(f entry) {
		v, ok := d.str(f)
		if !ok {
			return
		}
		d.spec.pos[f.path] = posOf(f.keyNode)
		if msg := checkBaseURL(v); msg != "" {
			d.add(f.val, f.path, "%s", msg)
		}
		arm.BaseURL = v
	})
	return arm
}

// checkBaseURL says what is wrong with an arm's base_url, or "". The address is quoted
// through RedactURL: a key in its query or userinfo must not reach an error or a log.
func checkBaseURL(v string) string {
	u, err := url.Parse(v)
	shown := RedactURL(v)
	switch {
	case err != nil:
		// url's own error quotes the whole address: say what is wrong without it.
		return fmt.Sprintf("base_url %q is not a URL", shown)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("base_url %q: want http:// or https://, as bench_serving's --base-url (http://host:30000)", shown)
	case u.Host == "":
		return fmt.Sprintf("base_url %q names no host", shown)
	case u.User != nil:
		return fmt.Sprintf("base_url %q: no credentials in the address", shown)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Sprintf("base_url %q: no query or fragment; the engine's paths are added to it", shown)
	}
	return ""
}

// checkRuntimeKind checks what each runtime kind needs and refuses what it would
// ignore: base_url outside the external runtime, docker settings outside docker.
func (d *decoder) checkRuntimeKind() {
	s := d.spec
	external := s.Runtime.Kind == RuntimeExternal
	urls := map[string]string{}
	for _, a := range s.Arms {
		path := "arms." + a.Name
		switch {
		case external && a.BaseURL == "":
			d.addAt(s.pos[path], path+".base_url", "the external runtime launches nothing: give arm %s the base_url it already runs at", a.Name)
		case !external && a.BaseURL != "":
			d.addAt(s.pos[path+".base_url"], path+".base_url", "base_url is for arms that already run (runtime: {kind: external}); the %s runtime launches its own", s.Runtime.Kind)
		}
		if a.BaseURL == "" {
			continue
		}
		key := strings.TrimRight(a.BaseURL, "/")
		if other, dup := urls[key]; dup {
			d.addAt(s.pos[path+".base_url"], path+".base_url", "arms %s and %s share base_url %s: one server cannot carry two arms' pins", other, a.Name, RedactURL(a.BaseURL))
		}
		urls[key] = a.Name
	}
	if external && len(s.Factors) > 0 {
		d.addAt(s.pos["factors"], "factors", "the external runtime needs each arm's base_url: list the arms explicitly (arms: {name: {env: ..., base_url: ...}})")
	}
	if external && len(s.Runtime.Nodes) > 0 {
		d.addAt(s.pos["runtime.nodes.0"], "runtime.nodes", "external arms run where their base_url says; leave runtime.nodes out")
	}
	for i, n := range s.Runtime.Nodes {
		path := fmt.Sprintf("runtime.nodes.%d", i)
		at := func(field string) Position {
			if p, ok := s.pos[path+"."+field]; ok {
				return p
			}
			return s.pos[path]
		}
		tls := n.CA != "" || n.Cert != "" || n.Key != ""
		docker := tls || n.Publish != "" || n.Network != ""
		switch {
		case docker && s.Runtime.Kind != RuntimeDocker:
			d.addAt(s.pos[path], path, "node %s: ca, cert, key, publish and network are settings of a Docker node (runtime kind docker)", n.Name)
		case tls && (n.CA == "" || n.Cert == "" || n.Key == ""):
			d.addAt(at("ca"), path, "node %s: TLS needs all three files: ca, cert and key", n.Name)
		case tls && !strings.HasPrefix(n.Host, "tcp://"):
			d.addAt(at("host"), path+".host", "node %s: TLS files are for a tcp:// daemon, not %q", n.Name, n.Host)
		}
	}
}
