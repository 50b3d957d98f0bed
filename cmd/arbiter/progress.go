package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/arbiterlab/arbiter/internal/ui"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
)

// The progress display: from the first second of a launch (the engine starting, for how
// long, the last line of its log) to its end (sessions finished, lost and corrupted so
// far, tokens per second). Several launches may run at once; each has its own line. On a
// terminal it is drawn with bars; anywhere else (a file, a pipe, /dev/null, a CI log) it
// is plain lines, one per launch every plainInterval. A bar counts only sessions that
// finished: a session lost to an error or a crash is counted as lost, never as done, and
// one a Ctrl-C left unfinished as unfinished.

// plainInterval is how often plain lines report each launch.
const plainInterval = 10 * time.Second

// launchState is what the display knows of one launch.
type launchState struct {
	info            orchestrator.LaunchInfo
	starting        time.Time // when its engine was launched
	ready           time.Time // zero until the engine generates
	running         time.Time // when its workload started; zero before
	ended           time.Time
	status          store.RunStatus
	lastLog         string
	done, lost, bad int // sessions finished, lost, and corrupted among the finished
	badLost         int // lost sessions that were corrupted before they were lost
	tokens          int64
	failed          string
	// refused: the engine was ready but did not hold its pins (failed says how).
	refused bool
}

// key names a launch: its arm and block.
func key(arm string, block int) string { return store.LaunchName(arm, block) }

// name is how a launch is shown: control/b0 (arm 1 of 2).
func (l *launchState) name() string {
	s := key(l.info.Arm, l.info.Block)
	if l.info.Position > 0 {
		s += fmt.Sprintf(" (arm %d of %d", l.info.Position, l.info.Arms)
		if l.info.Blocks > 1 {
			s += fmt.Sprintf(", block %d of %d", l.info.Block+1, l.info.Blocks)
		}
		s += ")"
	}
	return s
}

// status is the launch's state in words, as of now.
func (l *launchState) describe(now time.Time) string {
	switch {
	case l.refused:
		return "refused: the engine does not run as pinned"
	case l.failed != "":
		return "engine failed to start"
	case l.ready.IsZero():
		s := "engine starting " + clock(now.Sub(l.starting))
		if l.lastLog != "" {
			s += " | " + l.lastLog
		}
		return s
	}
	end := now
	if !l.ended.IsZero() {
		end = l.ended
	}
	s := fmt.Sprintf("%d/%d sessions, %d corrupted", l.done, l.info.Sessions, l.bad)
	// A launch cut short (an interrupt, its node lost) lost nothing: it left sessions
	// unfinished, and the verdict leaves it out of the analysis.
	cut := !l.ended.IsZero() && l.status.CutShort()
	if l.lost > 0 {
		word := "lost"
		if cut {
			word = "unfinished"
		}
		s += fmt.Sprintf(", %d %s", l.lost, word)
		if l.badLost > 0 {
			s += fmt.Sprintf(" (%d corrupted first)", l.badLost)
		}
	}
	if !l.running.IsZero() {
		if secs := end.Sub(l.running).Seconds(); secs > 0 {
			s += fmt.Sprintf(", %.0f tok/s", float64(l.tokens)/secs)
		}
		s += ", " + clock(end.Sub(l.running))
	}
	if !l.ended.IsZero() {
		s += ", " + string(l.status)
	}
	if cut {
		s += ", left out of the analysis"
	}
	return s
}

// clock writes a duration as 1m02s, or 4.2s under a minute.
func clock(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	d = d.Round(time.Second)
	if d < time.Hour {
		return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
	}
	return fmt.Sprintf("%dh%02dm%02ds", d/time.Hour, (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second)
}

// progress follows the experiment's launches and draws them, with bars or plain lines.
type progress struct {
	w     io.Writer // where plain lines and messages go: stderr, or the bars' writer
	bars  *mpb.Progress
	every time.Duration
	now   func() time.Time

	mu       sync.Mutex
	launches map[string]*launchState
	order    []string
	barOf    map[string]*mpb.Bar

	stop chan struct{}
	done chan struct{}
}

// newProgress returns the display for w: bars when w is a terminal and results are not
// JSON, plain lines otherwise.
func newProgress(w io.Writer, jsonOut bool) *progress {
	return startProgress(&lockedWriter{w: w}, ui.IsTerminal(w) && !jsonOut, plainInterval)
}

// lockedWriter serialises writes, so that the display's lines and the logs' never
// interleave (stderr may be a buffer or a pipe, not only a terminal).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startProgress starts a display on w: bars, or plain lines every interval.
func startProgress(w io.Writer, bars bool, every time.Duration) *progress {
	p := &progress{w: w, every: every, now: time.Now, launches: map[string]*launchState{}, barOf: map[string]*mpb.Bar{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if bars {
		p.bars = mpb.New(mpb.WithOutput(w), mpb.WithWidth(30), mpb.WithRefreshRate(200*time.Millisecond), mpb.WithAutoRefresh())
		p.w = p.bars
	}
	go p.loop()
	return p
}

// Writer is where logs go while the display runs: above the bars, so they do not tear
// them, or between the plain lines.
func (p *progress) Writer() io.Writer { return p.w }

// loop reads the last line of starting engines' logs, and writes plain lines.
func (p *progress) loop() {
	defer close(p.done)
	tail := time.NewTicker(time.Second)
	defer tail.Stop()
	var plain <-chan time.Time
	if p.bars == nil {
		t := time.NewTicker(p.every)
		defer t.Stop()
		plain = t.C
	}
	for {
		select {
		case <-p.stop:
			return
		case <-tail.C:
			p.readLogs()
		case <-plain:
			p.readLogs()
			p.printActive()
		}
	}
}

// readLogs refreshes the last log line of every engine still starting.
func (p *progress) readLogs() {
	p.mu.Lock()
	var paths []string
	var ls []*launchState
	for _, k := range p.order {
		l := p.launches[k]
		if l.ready.IsZero() && l.ended.IsZero() && l.info.LogPath != "" {
			paths, ls = append(paths, l.info.LogPath), append(ls, l)
		}
	}
	p.mu.Unlock()
	for i, path := range paths {
		line := lastLine(path)
		p.mu.Lock()
		ls[i].lastLog = line
		p.mu.Unlock()
	}
}

// printActive writes one plain line per launch that has not ended.
func (p *progress) printActive() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, k := range p.order {
		if l := p.launches[k]; l.ended.IsZero() {
			fmt.Fprintf(p.w, "arbiter: %s: %s\n", l.name(), l.describe(now))
		}
	}
}

// lastLine is the last non-empty line of a log file, made inert on a terminal
// (ui.Safe) and cut to 100 characters; "" when there is none yet.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 8 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-window, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.Split(ui.Safe(string(buf)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(strings.ReplaceAll(lines[i], "\t", " "))
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > 100 {
			line = string(r[:99]) + "…"
		}
		return line
	}
	return ""
}

func (p *progress) launch(arm string, block int) *launchState {
	return p.launches[key(arm, block)]
}

// EngineStarting implements orchestrator.LaunchProgress.
func (p *progress) EngineStarting(info orchestrator.LaunchInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key(info.Arm, info.Block)
	l := &launchState{info: info, starting: p.now()}
	if _, seen := p.launches[k]; !seen {
		p.order = append(p.order, k)
	}
	p.launches[k] = l
	if p.bars == nil {
		fmt.Fprintf(p.w, "arbiter: %s: engine starting; its log: %s\n", l.name(), info.LogPath)
		return
	}
	p.barOf[k] = p.bars.AddBar(int64(max(info.Sessions, 1)),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			p.mu.Lock()
			defer p.mu.Unlock()
			return l.name()
		}, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			p.mu.Lock()
			defer p.mu.Unlock()
			return l.describe(p.now())
		})))
}

// EngineReady implements orchestrator.LaunchProgress.
func (p *progress) EngineReady(arm string, block int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.launch(arm, block); l != nil {
		l.ready = p.now()
		if p.bars == nil {
			fmt.Fprintf(p.w, "arbiter: %s: engine ready after %s\n", l.name(), clock(l.ready.Sub(l.starting)))
		}
	}
}

// EngineRefused implements orchestrator.LaunchProgress: it says which pins the engine
// did not hold (or why they could not be checked).
func (p *progress) EngineRefused(arm string, block int, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.launch(arm, block)
	if l == nil {
		return
	}
	l.failed, l.refused = why, true
	fmt.Fprintf(p.w, "arbiter: %s: refused before any traffic: %s\n  its log: %s\n", l.name(), ui.Safe(why), l.info.LogPath)
}

// EngineFailed implements orchestrator.LaunchProgress: it prints why, the end of the
// engine's log and where the whole log is.
func (p *progress) EngineFailed(arm string, block int, why, logTail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.launch(arm, block)
	if l == nil {
		return
	}
	l.failed = why
	var b strings.Builder
	// Why and the log tail can quote the engine's own output: escape sequences in it
	// must not reach the terminal (an OSC 52 would write the clipboard).
	fmt.Fprintf(&b, "arbiter: %s: the engine did not start: %s\n", l.name(), ui.Safe(why))
	tail := strings.TrimRight(logTail, "\n")
	if tail == "" {
		tail = strings.TrimRight(tailOf(l.info.LogPath, 20), "\n")
	}
	tail = ui.Safe(tail)
	if tail != "" {
		fmt.Fprintf(&b, "  the end of its log:\n")
		for _, line := range strings.Split(tail, "\n") {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	fmt.Fprintf(&b, "  its log: %s\n", l.info.LogPath)
	io.WriteString(p.w, b.String())
}

// tailOf is the last n lines of a file; "" when it cannot be read.
func tailOf(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RunStarted implements orchestrator.Progress: the workload starts.
func (p *progress) RunStarted(arm string, block, sessions int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.launch(arm, block)
	if l == nil {
		// A caller that does not announce launches (no LaunchProgress): start here.
		k := key(arm, block)
		l = &launchState{info: orchestrator.LaunchInfo{Arm: arm, Block: block, Sessions: sessions}, starting: p.now()}
		l.ready = l.starting
		p.launches[k] = l
		p.order = append(p.order, k)
		if p.bars != nil {
			p.barOf[k] = p.bars.AddBar(int64(max(sessions, 1)),
				mpb.PrependDecorators(decor.Name(k, decor.WCSyncSpaceR)),
				mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
					p.mu.Lock()
					defer p.mu.Unlock()
					return l.describe(p.now())
				})))
		}
	}
	l.info.Sessions = sessions
	l.running = p.now()
	if bar := p.barOf[key(arm, block)]; bar != nil {
		bar.SetTotal(int64(max(sessions, 1)), false)
	}
}

// SessionDone implements orchestrator.Progress. Only a finished session fills the bar.
func (p *progress) SessionDone(arm string, block int, status store.SessionStatus, corrupted bool) {
	p.mu.Lock()
	l := p.launch(arm, block)
	bar := p.barOf[key(arm, block)]
	if l == nil {
		p.mu.Unlock()
		return
	}
	finished := store.Analysed(status)
	if finished {
		l.done++
	} else {
		l.lost++
	}
	switch {
	case corrupted && finished:
		l.bad++
	case corrupted:
		l.badLost++
	}
	p.mu.Unlock()
	if bar != nil && finished {
		bar.Increment()
	}
}

// TurnDone implements orchestrator.LaunchProgress.
func (p *progress) TurnDone(arm string, block, tokens int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.launch(arm, block); l != nil {
		l.tokens += int64(tokens)
	}
}

// RunEnded implements orchestrator.Progress. A bar that did not fill (sessions lost,
// the run interrupted or its engine gone) stops where it is: it never shows lost
// sessions as done.
func (p *progress) RunEnded(arm string, block int, status store.RunStatus) {
	p.mu.Lock()
	l := p.launch(arm, block)
	bar := p.barOf[key(arm, block)]
	if l == nil {
		p.mu.Unlock()
		return
	}
	l.ended, l.status = p.now(), status
	line := fmt.Sprintf("arbiter: %s: %s\n", l.name(), l.describe(l.ended))
	if p.bars == nil {
		io.WriteString(p.w, line)
	}
	p.mu.Unlock()
	if bar != nil && !bar.Completed() {
		bar.Abort(false)
	}
}

// Wait stops the display once the bars have drawn their last state.
func (p *progress) Wait() {
	close(p.stop)
	<-p.done
	if p.bars != nil {
		p.bars.Wait()
	}
}
