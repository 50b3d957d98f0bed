//go:build !linux

package runtime

import (
	"errors"
	"syscall"
)

// errNoProcfs reports a platform where arbiter cannot identify a process across time.
var errNoProcfs = errors.New("processes can be identified only on Linux (/proc)")

// engineProcAttr puts an engine into the process group pgid; the group's supervisor
// ends it if arbiter dies.
func engineProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

type procInfo struct {
	pid   int
	state byte
	pgrp  int
	start uint64
}

func readProc(int) (procInfo, error)     { return procInfo{}, errNoProcfs }
func bootID() (string, error)            { return "", errNoProcfs }
func identify(int) (ProcessID, error)    { return ProcessID{}, errNoProcfs }
func groupProcs(int) ([]procInfo, error) { return nil, errNoProcfs }
func groupMembers(int) ([]int, error)    { return nil, errNoProcfs }
