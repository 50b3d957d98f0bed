// Command rusage runs a command and prints, as one JSON object on stderr's last line
// (after the command's own output), its exit code, CPU time and peak resident memory.
//
// Tests measure arbiter's peak memory with it rather than with rusage of their own
// child: Go starts children with vfork, and Linux counts the parent's resident memory at
// exec into the child's ru_maxrss, so a test process of 140 MB would report every child
// as at least 140 MB. This command is a few megabytes, so the figure it reports is the
// command's own.
//
// Usage: rusage COMMAND [ARG...]
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Usage is what rusage prints.
type Usage struct {
	Exit     int     `json:"exit"`
	UserMS   float64 `json:"user_ms"`
	SystemMS float64 `json:"system_ms"`
	// MaxRSSKB is the peak resident set of the command, and of its children when it
	// waited for them.
	MaxRSSKB int64 `json:"max_rss_kb"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rusage COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "rusage: %v\n", err)
		os.Exit(127)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	u := Usage{Exit: cmd.ProcessState.ExitCode(), UserMS: float64(ru.Utime.Nano()) / 1e6,
		SystemMS: float64(ru.Stime.Nano()) / 1e6, MaxRSSKB: int64(ru.Maxrss)}
	b, _ := json.Marshal(u)
	fmt.Fprintf(os.Stderr, "\n%s\n", b)
}
