package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/arbiterlab/arbiter/store"
)

// barProgress draws one progress bar per run on stderr.
type barProgress struct {
	p *mpb.Progress

	mu   sync.Mutex
	bars map[string]*mpb.Bar
	bad  map[string]int
}

// newProgress returns bars on w when w is a terminal and results are not JSON; nil
// otherwise, so that logs and pipes get plain lines.
func newProgress(w io.Writer, jsonOut bool) *barProgress {
	f, ok := w.(*os.File)
	if jsonOut || !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &barProgress{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(40)), bars: map[string]*mpb.Bar{}, bad: map[string]int{}}
}

func runKey(arm string, block int) string { return fmt.Sprintf("%s/b%d", arm, block) }

func (b *barProgress) RunStarted(arm string, block, sessions int) {
	key := runKey(arm, block)
	bar := b.p.AddBar(int64(sessions),
		mpb.PrependDecorators(decor.Name(key, decor.WCSyncSpaceR), decor.CountersNoUnit("%d/%d sessions", decor.WCSyncWidth)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			b.mu.Lock()
			defer b.mu.Unlock()
			return fmt.Sprintf("%d corrupted", b.bad[key])
		}), decor.Elapsed(decor.ET_STYLE_GO, decor.WCSyncSpace)))
	b.mu.Lock()
	b.bars[key] = bar
	b.mu.Unlock()
}

func (b *barProgress) SessionDone(arm string, block int, corrupted bool) {
	key := runKey(arm, block)
	b.mu.Lock()
	bar := b.bars[key]
	if corrupted {
		b.bad[key]++
	}
	b.mu.Unlock()
	if bar != nil {
		bar.Increment()
	}
}

func (b *barProgress) RunEnded(arm string, block int, status store.RunStatus) {
	b.mu.Lock()
	bar := b.bars[runKey(arm, block)]
	b.mu.Unlock()
	if bar != nil && !bar.Completed() {
		bar.Abort(false)
	}
}

// Wait lets the bars draw their last state.
func (b *barProgress) Wait() { b.p.Wait() }
