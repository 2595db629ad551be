// Package batch is group commit: the calls that arrive while a batch is
// being written are written together as the next one. A caller alone
// waits for nothing (its batch of one starts at once); under a burst, N
// callers share one round of writes instead of queueing N rounds at the
// store. It is for writes whose cost is per command, not per document,
// as a serialised store's turn or a network round trip.
//
// It must not know what it batches or retry anything: the function it
// runs decides each item's result, and a failed batch is each of its
// callers' failure.
package batch

import (
	"context"
	"sync"
)

// Group runs Run on the items of the calls that arrive together. At most
// one batch runs at a time; Max bounds its items (<= 0: no bound).
type Group[T, R any] struct {
	// Run returns one result per item, in the items' order. Its context
	// is the first caller's, without its cancellation: a batch is written
	// to the end once begun, as the callers' own writes would be.
	Run func(ctx context.Context, items []T) []Result[R]
	Max int

	mu      sync.Mutex
	queue   []*call[T, R]
	running bool
}

// Result is one item's outcome.
type Result[R any] struct {
	Value R
	Err   error
}

type call[T, R any] struct {
	ctx  context.Context
	item T
	done chan Result[R]
}

// Do adds item to the next batch and waits for its result. A caller whose
// ctx ends first returns ctx's error; its item is written all the same.
func (g *Group[T, R]) Do(ctx context.Context, item T) (R, error) {
	c := &call[T, R]{ctx: ctx, item: item, done: make(chan Result[R], 1)}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.running
	g.running = true
	g.mu.Unlock()
	if lead {
		g.lead()
	}
	select {
	case r := <-c.done:
		return r.Value, r.Err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// lead runs the queued calls as one batch. The calls that came meanwhile
// are led by a new goroutine, so no caller waits for more than the batch
// running when it came and its own.
func (g *Group[T, R]) lead() {
	g.mu.Lock()
	n := len(g.queue)
	if g.Max > 0 && n > g.Max {
		n = g.Max
	}
	calls := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	items := make([]T, len(calls))
	for i, c := range calls {
		items[i] = c.item
	}
	results := g.run(context.WithoutCancel(calls[0].ctx), items)
	for i, c := range calls {
		c.done <- results[i]
	}

	g.mu.Lock()
	more := len(g.queue) > 0
	g.running = more
	g.mu.Unlock()
	if more {
		go g.lead()
	}
}

// run calls Run, making a short or panicking answer every item's error
// rather than a caller that waits forever.
func (g *Group[T, R]) run(ctx context.Context, items []T) (out []Result[R]) {
	defer func() {
		if p := recover(); p != nil {
			out = failAll[R](len(items), &PanicError{Value: p})
		}
	}()
	out = g.Run(ctx, items)
	if len(out) != len(items) {
		return failAll[R](len(items), errShort)
	}
	return out
}

func failAll[R any](n int, err error) []Result[R] {
	out := make([]Result[R], n)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// PanicError is each item's error when Run panicked.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return "batch: the batch's function panicked" }

type shortError struct{}

func (shortError) Error() string {
	return "batch: the batch's function answered fewer results than items"
}

var errShort error = shortError{}
