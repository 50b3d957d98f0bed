package slurmtest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCluster starts the cluster and runs a job on each node that asks for GPUs: Slurm
// must place it and export the devices it assigned.
func TestCluster(t *testing.T) {
	c := Start(t, Options{})
	ctx := context.Background()
	for _, n := range c.Nodes {
		out, err := c.Command(ctx, "srun", "-N1", "-w", n.Name, "--gres=gpu:2", "sh", "-c", "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES; ip -br addr")
		if err != nil {
			t.Fatal(err)
		}
		want := n.Addr + "/24"
		if !c.Namespaces {
			want = "127.0.0.1/8"
		}
		if !strings.Contains(out, n.Name+" 0,1") || !strings.Contains(out, want) {
			t.Errorf("job on %s printed %q; want its name, GPUs 0,1 and address %s", n.Name, out, n.Addr)
		}
	}
	jobs, err := c.Completions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(c.Nodes) {
		t.Fatalf("sacct -c lists %d jobs, want %d: %v", len(jobs), len(c.Nodes), jobs)
	}
	for i, j := range jobs {
		if j["State"] != "COMPLETED" || j["NodeList"] != c.Nodes[i].Name {
			t.Errorf("job %d: %v; want COMPLETED on %s", i, j, c.Nodes[i].Name)
		}
	}
}

// TestREST starts slurmrestd beside the cluster and reads the partitions through it.
func TestREST(t *testing.T) {
	c := Start(t, Options{REST: true})
	req, _ := http.NewRequest(http.MethodGet, c.RESTURL+"/slurm/v0.0.38/partitions", nil)
	req.Header.Set("X-SLURM-USER-NAME", "root")
	req.Header.Set("X-SLURM-USER-TOKEN", c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name": "`+c.Partition+`"`) && !strings.Contains(string(b), `"name":"`+c.Partition+`"`) {
		t.Fatalf("GET partitions: %s\n%s", resp.Status, b)
	}
}

// The names a cluster gives its nodes' interfaces are the ones IsNodeInterface knows, and
// the host's own are not.
func TestNodeInterfacesAreKnownByName(t *testing.T) {
	for _, id := range []int{0, 0xa318, 1<<16 - 1} {
		for _, side := range []byte{'h', 'n'} {
			for _, k := range []int{1, 2, 12} {
				if name := nodeInterface(id, side, k); !IsNodeInterface(name) || len(name) > 15 {
					t.Errorf("%q: known %v, %d bytes (Linux allows 15)", name, IsNodeInterface(name), len(name))
				}
			}
		}
	}
	for _, name := range []string{"docker0", "lo", "eth0", "asa318", "asset0", "br-5f1c", "veth1a2b3c"} {
		if IsNodeInterface(name) {
			t.Errorf("%q taken for a test node's interface", name)
		}
	}
}
