package ingest

import (
	"context"
	"sync"

	"github.com/nubes-io/nubes/pkg/batch"

	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/event"
)

// An event goes through its steps here, each in its own room, and this
// is where what follows each is decided:
//
//	receive   the body checked and parsed by the webhook's plugin (ingest.go)
//	record    the event stored, or found stored (event.Store.Record)
//	apply     the event applied to its alert (event.Alerting.Apply)
//	announce  the event queued for publishing (event.Store.Announce)
//	opened    a new alert's first escalation step, taken by its insert, handed on (Config.Opened)

// take records one event and, unless it was applied already, applies
// it, announces it and tells of the alert it opened. The events of the
// calls that come while others are being written are taken together
// (takeMany): a burst costs the store a few commands a batch, not a few
// an event.
func (in *Ingest) take(ctx context.Context, e *event.Event) (event.Outcome, error) {
	return in.group.Do(ctx, e)
}

// maxBatch bounds the events taken together.
const maxBatch = 64

// takeMany takes evs as take takes each: recorded in one insert, the
// events of one key counted on its open alert in one update (Store.
// RecordMany, Alerting.ApplyMany), the rest one by one.
func (in *Ingest) takeMany(ctx context.Context, evs []*event.Event) []batch.Result[event.Outcome] {
	out := make([]batch.Result[event.Outcome], len(evs))
	recs, errs := in.events.RecordMany(ctx, evs)
	var pending []event.Recorded
	var at []int
	for i, rec := range recs {
		out[i] = batch.Result[event.Outcome]{Value: rec.Outcome, Err: errs[i]}
		if errs[i] == nil && rec.Apply && in.alerting != nil {
			pending, at = append(pending, rec), append(at, i)
		}
	}
	if len(pending) == 0 {
		return out
	}
	applied, errs := in.alerting.ApplyMany(ctx, pending)
	var (
		wg     sync.WaitGroup
		opened []*alert.Alert
	)
	for j, ap := range applied {
		i, rec := at[j], pending[j]
		if errs[j] != nil {
			out[i].Err = errs[j]
			continue
		}
		o := &out[i].Value
		o.AlertID, o.Dropped = ap.AlertID, ap.Dropped
		if ap.Dropped {
			continue
		}
		if ap.Opened != nil {
			opened = append(opened, ap.Opened)
		}
		// Side by side: each announcement waits for JetStream's answer.
		wg.Go(func() { in.events.Announce(ctx, rec.Event, ap.AlertID) })
	}
	wg.Wait()
	// The batch's new alerts together: their first notices are recorded
	// together, and cleared in one command.
	if len(opened) > 0 && in.cfg.Opened != nil {
		in.cfg.Opened.Opened(opened...)
	}
	return out
}

// takeAll takes the events of one delivery in turn: a later event of the
// body applies after an earlier one (an ALERT and its RECOVERY).
func (in *Ingest) takeAll(ctx context.Context, evs []*event.Event) ([]event.Outcome, error) {
	out := make([]event.Outcome, 0, len(evs))
	for _, e := range evs {
		o, err := in.take(ctx, e)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}
