package event

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// The events of a burst, taken together (ingest batches the calls that
// arrive while one is being written): one insert stores them all, and
// the events of one key that count on its open alert count in one
// update and are marked in one. Each write is still of one document at
// a time, as MongoDB promises, so every step stays what Record and Apply
// make it: a batch dying half-way is finished like a request dying
// half-way (a retry, or Sweep). Whatever the batch cannot decide for
// sure goes one event at a time, as a lone event does.

// RecordMany stores evs as Record stores each, in one insert. An event
// stored before (a retried delivery, a body's next generation) or one
// whose insert failed is recorded on its own (Record). errs[i] is evs[i]'s.
func (s *Store) RecordMany(ctx context.Context, evs []*Event) ([]Recorded, []error) {
	recs, errs := make([]Recorded, len(evs)), make([]error, len(evs))
	if len(evs) == 1 {
		recs[0], errs[0] = s.Record(ctx, evs[0])
		return recs, errs
	}
	docs := make([]any, len(evs))
	for i, e := range evs {
		docs[i] = e
	}
	_, err := s.c.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	// One refused (stored before) or unknown is recorded again, and one
	// stored is found so.
	again := store.WriteErrors(err, len(evs))
	var wg sync.WaitGroup
	for i, e := range evs {
		if again[i] == nil {
			recs[i] = Recorded{Event: e, Outcome: Outcome{EventID: e.EventID, EventKey: e.EventKey}, Apply: true, Fresh: true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[i], errs[i] = s.Record(ctx, e)
		}()
	}
	wg.Wait()
	return recs, errs
}

// ApplyMany applies the recorded events recs as Apply applies each. The
// fresh events (not RECOVERY) of one key whose record names an alert
// they may count on count in one update (countMany). The keys with no
// record open their alerts together, each with its first event
// (openMany), and their other events count there next. Every other
// event is applied on its own, side by side.
func (al *Alerting) ApplyMany(ctx context.Context, recs []Recorded) ([]Applied, []error) {
	out, errs := make([]Applied, len(recs)), make([]error, len(recs))
	done := make([]bool, len(recs))
	keys := map[string][]int{}
	for i, r := range recs {
		if r.Fresh && r.Event.EventType != "RECOVERY" {
			id := keyRecordID(r.Event)
			keys[id] = append(keys[id], i)
		}
	}
	events := func(idx []int) []*Event {
		evs := make([]*Event, len(idx))
		for j, i := range idx {
			evs[j] = recs[i].Event
		}
		return evs
	}
	// count counts the events idx of one key on the alert its record
	// rec names (nil: read it), when it can for sure.
	count := func(rec *keyRecord, idx []int) {
		if alertID, err := al.countMany(ctx, rec, events(idx)); err == nil && alertID != "" {
			for _, i := range idx {
				out[i], done[i] = Applied{AlertID: alertID}, true
			}
		}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		openers []int   // each key with no record: its first event
		later   [][]int // and its others
	)
	if len(recs) > 1 {
		for _, idx := range keys {
			wg.Go(func() {
				rec, err := al.record(ctx, recs[idx[0]].Event)
				switch {
				case err != nil:
				case rec == nil:
					mu.Lock()
					openers, later = append(openers, idx[0]), append(later, idx[1:])
					mu.Unlock()
				case len(idx) > 1:
					count(rec, idx)
				}
			})
		}
		wg.Wait()
	}
	opened := make([]*alert.Alert, len(recs))
	if len(openers) > 0 {
		for j, ap := range al.openMany(ctx, events(openers)) {
			i := openers[j]
			opened[i] = ap.Opened
			if ap.AlertID == "" {
				continue
			}
			out[i], done[i] = ap, true
			if len(later[j]) > 0 {
				wg.Go(func() { count(nil, later[j]) })
			}
		}
		wg.Wait()
	}
	for i, r := range recs {
		if done[i] {
			continue
		}
		wg.Go(func() {
			out[i], errs[i] = al.Apply(ctx, r.Event, r.Fresh)
			// Opened by openMany, marked by Apply: still the new alert's.
			if out[i].Opened == nil {
				out[i].Opened = opened[i]
			}
		})
	}
	wg.Wait()
	return out, errs
}

// countMany counts the fresh events evs of one key on the alert its
// record rec names (nil: read it first), in one update, marks them
// applied in one command, and returns the alert; "" (nothing counted)
// when that needs deciding event by event: no record, not current for
// one of them, or the alert closed. Once counted, an error marking them
// leaves them to a retry or Sweep, whose Count finds them counted before.
func (al *Alerting) countMany(ctx context.Context, rec *keyRecord, evs []*Event) (string, error) {
	if rec == nil {
		var err error
		if rec, err = al.record(ctx, evs[0]); err != nil || rec == nil {
			return "", err
		}
	}
	counts := make([]alert.Event, len(evs))
	alertIDs := make([]string, len(evs))
	for i, e := range evs {
		if !current(rec, e) {
			return "", nil
		}
		counts[i], alertIDs[i] = countOf(e), rec.AlertID
	}
	counted, err := al.alerts.CountMany(ctx, rec.AlertID, counts)
	if err != nil || !counted {
		return "", err
	}
	latest := evs[0]
	for _, e := range evs[1:] {
		if e.CreatedAt.After(latest.CreatedAt.Time) {
			latest = e
		}
	}
	if err := al.slide(ctx, rec, latest, rec.AlertID); err != nil {
		return rec.AlertID, err
	}
	return rec.AlertID, al.markMany(ctx, evs, alertIDs)
}

// openMany opens the alerts of the fresh events evs, each of a key with
// no record: their keys' records in one insert (each naming its event
// as the opener, as claim), their alerts numbered and stored in one
// (alert.InsertMany), the events marked in one command. An event whose
// claim or alert did not go through (another event of its key came
// first, the store failed) answers no alert: it is applied on its own,
// which finishes what its claim began.
func (al *Alerting) openMany(ctx context.Context, evs []*Event) []Applied {
	out := make([]Applied, len(evs))
	docs := make([]any, len(evs))
	for i, e := range evs {
		docs[i] = openerRecord(e)
	}
	_, err := al.claims.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	refused := store.WriteErrors(err, len(evs))
	var alerts []*alert.Alert
	var at []int
	policies := map[core.Project]alert.Policy{} // a project's resolved once
	for i, e := range evs {
		if refused[i] != nil {
			continue
		}
		pr := projectOf(e)
		pol, ok := policies[*pr]
		if !ok {
			var err error
			if pol, err = al.alerts.PolicyFor(ctx, pr); err != nil {
				continue
			}
			policies[*pr] = pol
		}
		alerts, at = append(alerts, al.alertOf(e, pol)), append(at, i)
	}
	stored, created, errs := al.alerts.InsertMany(ctx, alerts)
	var marked []*Event
	var alertIDs []string
	for j, i := range at {
		if errs[j] != nil {
			continue
		}
		out[i] = Applied{AlertID: stored[j].AlertID}
		if created[j] {
			out[i].Opened = stored[j]
		}
		marked, alertIDs = append(marked, evs[i]), append(alertIDs, stored[j].AlertID)
	}
	if err := al.markMany(ctx, marked, alertIDs); err != nil {
		// Stored but not marked: each is applied on its own, which finds
		// its alert (and counted there).
		for i := range out {
			out[i].AlertID = ""
		}
	}
	return out
}

// markMany marks evs[i] applied to alertIDs[i], as mark, in one command
// of one update by _id each (not {_id: {$in}}): each finds its event by
// the _id index on every store.
func (al *Alerting) markMany(ctx context.Context, evs []*Event, alertIDs []string) error {
	if len(evs) == 0 {
		return nil
	}
	marks := make([]mongo.WriteModel, len(evs))
	for i, e := range evs {
		marks[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: e.ID}}).SetUpdate(markOf(alertIDs[i]))
	}
	_, err := al.events.BulkWrite(ctx, marks, options.BulkWrite().SetOrdered(false))
	return store.Wrap(err)
}
