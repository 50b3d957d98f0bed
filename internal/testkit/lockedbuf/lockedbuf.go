// Package lockedbuf is a bytes.Buffer that goroutines may write and read at once: what a
// test hands a logger or a progress display, and reads while they still write.
package lockedbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer whose Write and String hold a lock.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
