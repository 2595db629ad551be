package ingest

import (
	"context"

	"github.com/nubes-io/nubes/services/monitoring/internal/event"
)

// An event goes through its steps here, each in its own room, and this
// is where what follows each is decided:
//
//	receive   the body checked and parsed by the webhook's plugin (ingest.go)
//	record    the event stored, or found stored (event.Store.Record)
//	apply     the event applied to its alert (event.Alerting.Apply)
//	announce  the event queued for publishing (event.Store.Announce)
//	opened    a new alert's first escalation step asked for (Config.Opened)

// take records one event and, unless it was applied already, applies
// it, announces it and tells of the alert it opened.
func (in *Ingest) take(ctx context.Context, e *event.Event) (event.Outcome, error) {
	rec, err := in.events.Record(ctx, e)
	if err != nil || !rec.Apply || in.alerting == nil {
		return rec.Outcome, err
	}
	ap, err := in.alerting.Apply(ctx, rec.Event, rec.Fresh)
	if err != nil {
		return rec.Outcome, err
	}
	out := rec.Outcome
	out.AlertID, out.Dropped = ap.AlertID, ap.Dropped
	if ap.Dropped {
		return out, nil
	}
	in.events.Announce(ctx, rec.Event, ap.AlertID)
	if ap.Opened && in.cfg.Opened != nil {
		in.cfg.Opened.Opened(ap.AlertID)
	}
	return out, nil
}

// takeAll takes the events of one delivery in turn.
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
