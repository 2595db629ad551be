package core

import (
	"time"

	"github.com/nubes-io/nubes/pkg/wire"
)

// Clock is monitoring's one time source: the stamps of events and alerts,
// the dedupe window, escalation, the purge, and the rate limits of the
// public URLs all read it, so a test that moves it moves them together.
// The zero Clock is wire.Now.
type Clock func() time.Time

// Now is the time of c (wire.Now for the zero Clock).
func (c Clock) Now() time.Time {
	if c == nil {
		return wire.Now()
	}
	return c()
}
