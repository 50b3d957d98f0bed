package workload

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

// startRefserve runs the reference engine as a real process on a free loopback port with
// env and args, and returns its base URL; it is stopped when the test ends.
func startRefserve(t *testing.T, env []string, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs refserve")
	}
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	cmd := exec.Command(bin, append([]string{"--port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	urlRE := regexp.MustCompile(`url=(http://\S+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() { // read to the end, so the engine never blocks on its log
			if m := urlRE.FindStringSubmatch(sc.Text()); m != nil {
				once.Do(func() { found <- m[1] })
			}
		}
		once.Do(func() { close(found) })
	}()
	select {
	case u, ok := <-found:
		if !ok {
			t.Fatal("refserve exited before it listened")
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("refserve did not say where it listens within 30s")
	}
	return ""
}

// phaseRecorder is a memRecorder that keeps phases too.
type phaseRecorder struct {
	memRecorder
	pmu    sync.Mutex
	phases []Phase
}

func (p *phaseRecorder) Phase(ph Phase) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	p.phases = append(p.phases, ph)
}

func (p *phaseRecorder) phase(t *testing.T, name string) Phase {
	t.Helper()
	p.pmu.Lock()
	defer p.pmu.Unlock()
	for _, ph := range p.phases {
		if ph.Name == name {
			return ph
		}
	}
	t.Fatalf("no phase %q among %d", name, len(p.phases))
	return Phase{}
}
