package batch

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// gate is a Run that records each batch and holds the first one until
// released, so that the callers arriving meanwhile queue for the next.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 100), release: make(chan struct{})} }

func (g *gate) run(_ context.Context, items []int) []Result[int] {
	g.mu.Lock()
	first := len(g.batches) == 0
	g.batches = append(g.batches, slices.Clone(items))
	g.mu.Unlock()
	g.entered <- struct{}{}
	if first {
		<-g.release
	}
	out := make([]Result[int], len(items))
	for i, v := range items {
		out[i].Value = v * 10
	}
	return out
}

func TestAloneRunsAtOnce(t *testing.T) {
	t.Parallel()
	var seen [][]int
	g := &Group[int, int]{Run: func(_ context.Context, items []int) []Result[int] {
		seen = append(seen, slices.Clone(items))
		return []Result[int]{{Value: items[0] + 1}}
	}}
	for i := range 3 {
		v, err := g.Do(context.Background(), i)
		if err != nil || v != i+1 {
			t.Fatalf("Do(%d) = %d, %v", i, v, err)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("batches %v, want three of one", seen)
	}
}

// The callers that come while a batch runs are written together next,
// each given its own result.
func TestArrivalsShareTheNextBatch(t *testing.T) {
	t.Parallel()
	gt := newGate()
	g := &Group[int, int]{Run: gt.run}
	var wg sync.WaitGroup
	got := make([]int, 6)
	call := func(i int) {
		defer wg.Done()
		v, err := g.Do(context.Background(), i)
		if err != nil {
			t.Errorf("Do(%d): %v", i, err)
		}
		got[i] = v
	}
	wg.Add(1)
	go call(0)
	<-gt.entered // the first batch holds [0]
	wg.Add(5)
	for i := 1; i < 6; i++ {
		go call(i)
	}
	waitQueued(g, 5)
	close(gt.release)
	wg.Wait()
	for i, v := range got {
		if v != i*10 {
			t.Errorf("result of %d = %d, want %d", i, v, i*10)
		}
	}
	if len(gt.batches) != 2 || len(gt.batches[0]) != 1 || len(gt.batches[1]) != 5 {
		t.Fatalf("batches %v, want [0] then the five others together", gt.batches)
	}
}

// waitQueued yields until n calls wait behind the running batch.
func waitQueued(g *Group[int, int], n int) {
	for {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued == n {
			return
		}
		runtime.Gosched()
	}
}

func TestMaxBoundsABatch(t *testing.T) {
	t.Parallel()
	gt := newGate()
	g := &Group[int, int]{Run: gt.run, Max: 2}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = g.Do(context.Background(), 0) }()
	<-gt.entered
	wg.Add(5)
	for i := 1; i < 6; i++ {
		go func() { defer wg.Done(); _, _ = g.Do(context.Background(), i) }()
	}
	waitQueued(g, 5)
	close(gt.release)
	wg.Wait()
	var sizes []int
	all := []int{}
	for _, b := range gt.batches {
		sizes = append(sizes, len(b))
		all = append(all, b...)
	}
	slices.Sort(all)
	if !slices.Equal(sizes, []int{1, 2, 2, 1}) || !slices.Equal(all, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("batches %v, want sizes 1, 2, 2, 1 covering 0..5 once", gt.batches)
	}
}

func TestBrokenRunFailsEveryCaller(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(context.Context, []int) []Result[int]
		want func(error) bool
	}{
		{"short answer", func(context.Context, []int) []Result[int] { return nil }, func(err error) bool { return errors.Is(err, errShort) }},
		{"panic", func(context.Context, []int) []Result[int] { panic("boom") }, func(err error) bool {
			var p *PanicError
			return errors.As(err, &p) && p.Value == "boom"
		}},
		{"item error", func(_ context.Context, items []int) []Result[int] {
			return []Result[int]{{Err: errors.New("no")}}
		}, func(err error) bool { return err != nil && err.Error() == "no" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Group[int, int]{Run: tc.run}
			if _, err := g.Do(context.Background(), 1); !tc.want(err) {
				t.Fatalf("err = %v", err)
			}
			// The group is not left running: the next call leads again.
			g.mu.Lock()
			running := g.running
			g.mu.Unlock()
			if running {
				t.Fatal("the group still runs after its batch")
			}
		})
	}
}

// A caller that gives up gets its context's error; its item is written
// all the same and the batch's context is not cancelled.
func TestCallerGivesUp(t *testing.T) {
	t.Parallel()
	gt := newGate()
	var ranCtxErr error
	g := &Group[int, int]{Run: func(ctx context.Context, items []int) []Result[int] {
		out := gt.run(ctx, items)
		ranCtxErr = ctx.Err()
		return out
	}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := g.Do(ctx, 7); errc <- err }()
	<-gt.entered
	cancel()
	close(gt.release)
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// Wait for the batch to end: the next call leads a batch of its own.
	if v, err := g.Do(context.Background(), 8); err != nil || v != 80 {
		t.Fatalf("next Do = %d, %v", v, err)
	}
	if ranCtxErr != nil {
		t.Fatalf("the batch's context was cancelled: %v", ranCtxErr)
	}
}
