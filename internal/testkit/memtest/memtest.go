// Package memtest measures what one piece of a test allocates, and nothing else: the
// piece runs again in a child process that runs only that test, so that the tests running
// beside it in the parent (a loaded `make test` runs many at once) are not counted.
package memtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// childEnv names the test a child process measures.
const childEnv = "ARBITER_MEMTEST_CHILD"

// marker starts the line on which a child reports its measure.
const marker = "memtest-measure:"

// Usage is what f cost: the bytes it allocated, and how much the live heap grew over it
// (after a collection at each end).
type Usage struct {
	Allocated  uint64
	HeapGrowth int64
}

// Measure runs f, then measures it in a child process that runs only t (by name) and
// returns what f cost there. In that child, Measure measures f in place and returns that.
// A test's assertions on what f did then hold in both processes; f must be repeatable.
func Measure(t *testing.T, f func()) Usage {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		u := measure(f)
		fmt.Printf("\n%s %d %d\n", marker, u.Allocated, u.HeapGrowth)
		return u
	}
	f()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, part := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run", strings.Join(run, "/"), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), marker)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 {
			break
		}
		a, err1 := strconv.ParseUint(f[0], 10, 64)
		g, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			if err != nil {
				t.Errorf("the measuring process of %s failed (%v):\n%s", t.Name(), err, out.String())
			}
			return Usage{Allocated: a, HeapGrowth: g}
		}
	}
	t.Fatalf("the measuring process of %s reported nothing (%v):\n%s", t.Name(), err, out.String())
	return Usage{}
}

func measure(f func()) Usage {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	return Usage{Allocated: allocated, HeapGrowth: int64(after.HeapAlloc) - int64(before.HeapAlloc)}
}
