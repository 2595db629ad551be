package testkit

import (
	"bytes"
	"sync"
)

// LogBuffer collects log output written from many goroutines (the writer
// of a slog handler given to a service, its server and its workers);
// String is what was logged so far.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
