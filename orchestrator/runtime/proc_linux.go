package runtime

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// engineProcAttr puts an engine into the process group pgid. Pdeathsig also tells the
// engine itself at once when arbiter dies; the group's supervisor covers what it
// spawned.
func engineProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGTERM}
}

// procInfo is what /proc/PID/stat says about a process that arbiter needs.
type procInfo struct {
	pid   int
	state byte   // R, S, D, Z (zombie), ...
	pgrp  int    // process group
	start uint64 // start time, clock ticks after boot (field 22)
}

// readProc reads /proc/PID/stat.
func readProc(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	return parseStat(b)
}

// parseStat reads fields 1, 3, 5 and 22 of a /proc/PID/stat line. The command name
// (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields
// after it are counted from its last ')'.
func parseStat(b []byte) (procInfo, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return procInfo{}, fmt.Errorf("proc stat: no command name in %q", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procInfo{}, fmt.Errorf("proc stat: pid: %w", err)
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, fmt.Errorf("proc stat of %d: %d fields after the name, want at least 20", pid, len(f))
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return procInfo{}, fmt.Errorf("proc stat of %d: pgrp: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procInfo{}, fmt.Errorf("proc stat of %d: start time: %w", pid, err)
	}
	return procInfo{pid: pid, state: f[0][0], pgrp: pgrp, start: start}, nil
}

// bootID names this boot of this machine; a pid recorded under another boot id names
// no process here.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// identify names the live process pid across time.
func identify(pid int) (ProcessID, error) {
	boot, err := bootID()
	if err != nil {
		return ProcessID{}, err
	}
	p, err := readProc(pid)
	if err != nil {
		return ProcessID{}, err
	}
	return ProcessID{Pid: pid, Start: p.start, BootID: boot}, nil
}

// groupProcs lists the living (not zombie) processes of process group pgid.
func groupProcs(pgid int) ([]procInfo, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var out []procInfo
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		p, err := readProc(pid)
		if err != nil || p.pgrp != pgid || p.state == 'Z' {
			continue // gone meanwhile, another group, or dead and awaiting its parent
		}
		out = append(out, p)
	}
	return out, nil
}

// groupMembers lists the pids of the living processes of group pgid.
func groupMembers(pgid int) ([]int, error) {
	procs, err := groupProcs(pgid)
	if err != nil {
		return nil, err
	}
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.pid
	}
	return pids, nil
}
