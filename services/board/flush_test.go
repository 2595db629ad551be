package board_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nubes-io/nubes/services/board/internal/post"
)

// errLateAnswer stands for a write's answer that came after the flush's
// timeout.
var errLateAnswer = errors.New("the store answered after the flush's timeout")

// startWriter runs the view-count writer until the test ends.
func (c *callers) startWriter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.worker(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (c *callers) view(t *testing.T, postID string, times int) {
	t.Helper()
	for range times {
		var got postInfo
		c.memberA.Call("/board/v1/post/get", map[string]any{"post_id": postID}).OK(&got)
	}
}

// waitFor waits for a signal of a writer; a minute only tells a hang.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("no %s in a minute", what)
	}
}

func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default: // a signal already waits
	}
}

// TestViewWriteLandedButFailedCountsOnce: a view flush whose $inc the
// store applied but whose answer failed (a timeout answered late) must
// not count its views again: the next flush finds its token on the post.
// Before the fix the views were put back as pending and written twice.
func TestViewWriteLandedButFailedCountsOnce(t *testing.T) {
	c := setupViews(t, false)
	b := c.board(t, "Notices")
	p := c.post(t, c.adminA, b.BoardID, "", "Hot")
	failed, written := make(chan struct{}, 1), make(chan struct{}, 1)
	var first atomic.Bool
	defer post.FailViewWrites(p.PostID, func(step post.ViewStep) error {
		switch {
		case step != post.Applied:
			return nil
		case first.CompareAndSwap(false, true):
			signal(failed)
			return errLateAnswer
		}
		signal(written)
		return nil
	})()
	// Three views buffered before the writer starts: its first flush
	// writes them at once, and fails after the write.
	c.view(t, p.PostID, 3)
	c.startWriter(t)
	waitFor(t, failed, "failed view write")
	if got := c.stored(t, p.PostID).ViewCount; got != 3 {
		t.Fatalf("after the write that landed, stored view_count %d, want 3", got)
	}
	c.view(t, p.PostID, 1)
	waitFor(t, written, "view write after the failed one")
	if got := c.stored(t, p.PostID).ViewCount; got != 4 {
		t.Fatalf("stored view_count %d, want 4 (3 landed with a failed answer, then 1)", got)
	}
}

// TestViewWriteNotSentIsWrittenLater: a flush that failed before its
// write reached the store leaves the views in doubt too; the next flush
// finds no token on the post and writes them, with the views since.
func TestViewWriteNotSentIsWrittenLater(t *testing.T) {
	c := setupViews(t, false)
	b := c.board(t, "Notices")
	p := c.post(t, c.adminA, b.BoardID, "", "Hot")
	failed, written := make(chan struct{}, 1), make(chan struct{}, 1)
	var first atomic.Bool
	defer post.FailViewWrites(p.PostID, func(step post.ViewStep) error {
		switch {
		case step == post.Sending && first.CompareAndSwap(false, true):
			signal(failed)
			return errLateAnswer
		case step == post.Applied:
			signal(written)
		}
		return nil
	})()
	c.view(t, p.PostID, 3)
	c.startWriter(t)
	waitFor(t, failed, "failed view write")
	c.view(t, p.PostID, 1)
	// The next write carries the 3 in doubt, and the 4th view with them
	// or in a write of its own.
	for {
		waitFor(t, written, "view write after the failed one")
		got := c.stored(t, p.PostID).ViewCount
		if got == 4 {
			break
		}
		if got != 3 {
			t.Fatalf("stored view_count %d, want 3 then 4", got)
		}
	}
}

// TestViewWriteInDoubtAcrossReplicas: another replica's flush of the
// post between a write in doubt and its settling does not hide whether
// the write landed (each replica keeps its own token on the post).
func TestViewWriteInDoubtAcrossReplicas(t *testing.T) {
	a := setupViews(t, false)
	b := setupOn(t, a.db, false)
	bd := a.board(t, "Notices")
	p := a.post(t, a.adminA, bd.BoardID, "", "Hot")
	failed, bWrote, settled, written := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	var first, bDone, settle atomic.Bool
	defer post.FailViewWrites(p.PostID, func(step post.ViewStep) error {
		switch step {
		case post.Settling: // only a's write is in doubt
			if !settle.Load() {
				return errLateAnswer // a's settling waits for b's write
			}
			signal(settled)
		case post.Applied:
			switch {
			case first.CompareAndSwap(false, true): // a's 3 views
				signal(failed)
				return errLateAnswer
			case bDone.CompareAndSwap(false, true): // b's 2
				signal(bWrote)
			default:
				signal(written)
			}
		}
		return nil
	})()
	a.view(t, p.PostID, 3)
	b.view(t, p.PostID, 2)
	a.startWriter(t)
	waitFor(t, failed, "failed view write of replica a")
	b.startWriter(t)
	waitFor(t, bWrote, "view write of replica b")
	if got := a.stored(t, p.PostID).ViewCount; got != 5 {
		t.Fatalf("after both writes, stored view_count %d, want 5", got)
	}
	settle.Store(true)
	waitFor(t, settled, "settling of replica a's write")
	a.view(t, p.PostID, 1)
	waitFor(t, written, "view write of replica a after settling")
	if got := a.stored(t, p.PostID).ViewCount; got != 6 {
		t.Fatalf("stored view_count %d, want 6 (3 landed with a failed answer, 2, then 1)", got)
	}
}
