package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/machinelock"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// DefaultGPULockDir is where every arbiter on a host claims GPUs, whoever runs it: one
// lock file per device. $ARBITER_GPU_LOCK_DIR (or Options.GPULockDir) names another.
const DefaultGPULockDir = "/tmp/arbiter-gpus"

// gpuLockDir resolves the lock folder: the option, else $ARBITER_GPU_LOCK_DIR, else the
// default.
func gpuLockDir(opt string) string {
	if opt != "" {
		return opt
	}
	if d := os.Getenv("ARBITER_GPU_LOCK_DIR"); d != "" {
		return d
	}
	return DefaultGPULockDir
}

// gpuScope names the machine whose GPUs a node's arms run on, as a lock file prefix:
// "local" for the process runtime and for a Docker daemon on this machine, the daemon's
// host for a remote one (whose lock files only arbiters of this machine see).
func gpuScope(kind arms.RuntimeKind, host string) string {
	if kind != arms.RuntimeDocker || arms.IsLocalHost(host) {
		return "local"
	}
	u, err := url.Parse(host)
	if err != nil || u.Scheme != "tcp" {
		return "local"
	}
	switch h := u.Hostname(); h {
	case "", "localhost", "127.0.0.1", "::1":
		return "local"
	default:
		var b strings.Builder
		for _, r := range h {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		return b.String()
	}
}

// claimSlots claims the devices of every slot, machine by machine (in name order, so
// that two arbiters never each hold what the other waits for).
func claimSlots(ctx context.Context, dir string, spec *arms.Spec, slots []arms.Slot, holder string, log *slog.Logger) (*gpuClaim, error) {
	nodes := spec.Nodes()
	byScope := map[string][]string{}
	for _, sl := range slots {
		if sl.GPUs == "" {
			continue
		}
		scope := gpuScope(spec.Runtime.Kind, nodes[sl.NodeIndex].Host)
		byScope[scope] = append(byScope[scope], sl.GPUs)
	}
	scopes := make([]string, 0, len(byScope))
	for sc := range byScope {
		scopes = append(scopes, sc)
	}
	sort.Strings(scopes)
	all := &gpuClaim{}
	for _, sc := range scopes {
		c, err := claimGPUs(ctx, dir, sc, strings.Join(byScope[sc], ","), holder, log)
		if err != nil {
			all.release()
			return nil, err
		}
		all.files = append(all.files, c.files...)
	}
	return all, nil
}

// holderText says who holds a claim, for an arbiter that finds the GPUs taken.
func holderText(spec *arms.Spec, dbPath string) string {
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(dbPath); err == nil {
		dbPath = abs
	}
	return fmt.Sprintf("arbiter pid %d on %s, experiment %s, database %s, since %s", os.Getpid(), host, spec.Name,
		dbPath, time.Now().UTC().Format(time.RFC3339))
}

// gpuClaim is an arbiter's claim on the GPUs its arms run on, held for the whole
// experiment: one exclusive flock per device on a file under the lock folder. The
// kernel drops a claim when its arbiter exits, however it exits.
type gpuClaim struct{ files []*os.File }

// claimGPUs claims the devices of gpus ("0,1"; empty claims nothing) on the machine
// scope. A device another arbiter holds is waited for, with a warning that names the
// holder, until it is free or ctx ends. Devices are claimed in ascending order, so two
// arbiters that want overlapping sets cannot each hold what the other waits for.
func claimGPUs(ctx context.Context, dir, scope, gpus, holder string, log *slog.Logger) (*gpuClaim, error) {
	c := &gpuClaim{}
	if gpus == "" {
		return c, nil
	}
	ids, err := runtime.ParseGPUs(gpus)
	if err != nil {
		return nil, err
	}
	sortDevices(ids)
	dir, err = machinelock.SharedDir(dir)
	if err != nil {
		return nil, fmt.Errorf("claim GPUs: %w", err)
	}
	for _, id := range ids {
		f, err := claimDevice(ctx, filepath.Join(dir, scope+"-gpu"+id+".lock"), id, holder, log)
		if err != nil {
			c.release()
			return nil, err
		}
		c.files = append(c.files, f)
	}
	return c, nil
}

// claimDevice takes the lock on one device's file, waiting while another arbiter holds
// it.
func claimDevice(ctx context.Context, path, id, holder string, log *slog.Logger) (*os.File, error) {
	f, err := machinelock.Open(path)
	if err != nil {
		return nil, fmt.Errorf("claim GPU %s: %w", id, err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	said := ""
	for {
		ok, err := machinelock.TryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("claim GPU %s (%s): %w", id, path, err)
		}
		if ok {
			// Best effort: a file another user created may not be writable; the lock
			// holds all the same.
			if f.Truncate(0) == nil {
				f.WriteAt([]byte(holder+"\n"), 0)
			}
			return f, nil
		}
		if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != said {
			said = strings.TrimSpace(string(b))
			if said == "" {
				said = "another arbiter"
			}
			log.Warn(fmt.Sprintf("GPU %s is in use by %s; waiting until it is free (Ctrl-C to give up)", id, said),
				"lock", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// release gives the GPUs back.
func (c *gpuClaim) release() {
	for _, f := range c.files {
		f.Close() // closing the only descriptor drops the flock
	}
	c.files = nil
}

// sortDevices orders device ids numerically.
func sortDevices(ids []string) {
	num := func(s string) int {
		n := 0
		for _, r := range s {
			n = n*10 + int(r-'0')
		}
		return n
	}
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && num(ids[j]) < num(ids[j-1]); j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}
