// Package hostileplugin serves detector plugins that misbehave, for tests of what arbiter
// does about them: a test binary that calls MaybeServe first in its TestMain becomes the
// plugin when it is started under a name Path gives it.
package hostileplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/plugins"
)

// namePrefix starts the name of a link to the test binary that serves a hostile plugin.
const namePrefix = "arbiter-detector-hostile-"

// The modes a hostile plugin can be started in; Path takes one, with its argument after a
// '-' where it has one.
const (
	// ClaimsBuiltin names itself "claims" but labels every response clean in the name of
	// dsml-leak.
	ClaimsBuiltin = "claimsbuiltin"
	// NamedBuiltin calls itself dsml-leak.
	NamedBuiltin = "namedbuiltin"
	// Slow takes its argument in milliseconds over every response (slow-3000).
	Slow = "slow"
	// Hangs never answers.
	Hangs = "hangs"
	// Crashes exits after answering its argument's number of responses (crashes-2).
	Crashes = "crashes"
	// Huge answers with a reason of its argument in bytes, full of terminal escapes and
	// markdown (huge-1048576).
	Huge = "huge"
	// Noisy writes a line holding its argument to its standard error on every response,
	// and flags every response.
	Noisy = "noisy"
	// Snoops reads its environment: every response's reason, and a line on its standard
	// error, list the variables it sees whose names end in _TOKEN or _KEY, with their
	// values, sorted ("none" when it sees none).
	Snoops = "snoops"
)

// MaybeServe serves the plugin that the running binary's name asks for and exits; it
// returns at once when the binary was not started as one.
func MaybeServe() {
	base := filepath.Base(os.Args[0])
	mode, ok := strings.CutPrefix(base, namePrefix)
	if !ok {
		return
	}
	kind, arg, _ := strings.Cut(mode, "-")
	n, _ := strconv.Atoi(arg)
	plugins.Serve(&hostile{kind: kind, arg: arg, n: n})
	os.Exit(0)
}

// Path returns a path under which the running test binary serves a plugin in that mode
// (a link to the binary, in a folder of t's).
func Path(t testing.TB, mode string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), namePrefix+mode)
	if err := os.Symlink(exe, p); err != nil {
		t.Fatal(err)
	}
	return p
}

type hostile struct {
	kind, arg string
	n         int
	calls     atomic.Int64
}

func (h *hostile) Name() string {
	switch h.kind {
	case NamedBuiltin:
		return "dsml-leak"
	case ClaimsBuiltin:
		return "claims"
	}
	return "hostile-" + h.kind
}

func (h *hostile) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	n := h.calls.Add(1)
	switch h.kind {
	case ClaimsBuiltin, NamedBuiltin:
		return plugins.Label{Detector: "dsml-leak", Corrupted: false, Reason: "all clean"}, nil
	case Slow:
		time.Sleep(time.Duration(h.n) * time.Millisecond)
	case Hangs:
		select {}
	case Crashes:
		if n > int64(h.n) {
			fmt.Fprintln(os.Stderr, "hostile plugin: crashing now")
			os.Exit(3)
		}
	case Huge:
		unit := "\x1b[2J\x1b]0;owned\x07| **bold** `code` \u202e\n"
		return plugins.Label{Corrupted: true, Reason: strings.ToValidUTF8(strings.Repeat(unit, h.n/len(unit)+1)[:h.n], "")}, nil
	case Noisy:
		fmt.Fprintf(os.Stderr, "hostile plugin says %s \x1b[31mred\x1b[0m\n", h.arg)
		return plugins.Label{Corrupted: true, Reason: "noisy"}, nil
	case Snoops:
		var seen []string
		for _, kv := range os.Environ() {
			if name, _, _ := strings.Cut(kv, "="); strings.HasSuffix(name, "_TOKEN") || strings.HasSuffix(name, "_KEY") {
				seen = append(seen, kv)
			}
		}
		slices.Sort(seen)
		if len(seen) == 0 {
			seen = []string{"none"}
		}
		fmt.Fprintf(os.Stderr, "hostile plugin sees %s\n", strings.Join(seen, " "))
		return plugins.Label{Reason: strings.Join(seen, " ")}, nil
	}
	return plugins.Label{Reason: ""}, nil
}
