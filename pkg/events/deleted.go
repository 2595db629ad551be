package events

// Deletions: identity's deletes of a user, a workspace or a project reach
// every service that holds records owned by them.
//
// Identity records a Deleted in its outbox (Outbox.Add) as a step of the
// delete's teardown, after the mark and before the record goes: a delete
// that answered success has its event durable, and a delete retried after
// a failure adds the same event id again (a no-op, or a duplicate the
// stream drops). Every service that owns such records runs
// ConsumeDeletions with its own durable consumer and its own cleanup, the
// service's rule: deletes by owner keys (DeleteMany on domain_id and
// user_id, workspace_id or project_id), so a redelivery does nothing new.
// A cleanup that fails is delivered again (no bound: a delete must
// finish); a consumer that was down finds the events waiting, since each
// service's durable consumer keeps its own place in DeletedStream. A
// payload that is no deletion goes to the service's dead letter.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
)

const (
	// DeletedStream carries identity's deletions, kept for every
	// service's consumer (limits retention: each has its own place).
	DeletedStream = "NUBES_DELETED"
	// DeletedSubject: payload Deleted, Nats-Msg-Id = Deleted.ID.
	DeletedSubject = "nubes.deleted"
	// DeletedMaxAge is how long a deletion waits for a consumer that is
	// down: a service down longer misses it (docs/operations.md).
	DeletedMaxAge = 30 * 24 * time.Hour
)

// DeletedConsumer is the durable consumer of service on DeletedStream.
func DeletedConsumer(service string) string { return service + "-deleted" }

// What a Deleted names.
const (
	DeletedUser      = "USER"
	DeletedWorkspace = "WORKSPACE"
	DeletedProject   = "PROJECT"
)

// Deleted says that identity deleted a user (DomainID, UserID), a
// workspace (DomainID, WorkspaceID) or a project (DomainID, WorkspaceID,
// ProjectID): every record it owned is to go.
type Deleted struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"` // DeletedUser, DeletedWorkspace, DeletedProject
	DomainID    string `json:"domain_id"`
	UserID      string `json:"user_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	ProjectID   string `json:"project_id,omitempty"`
	DeletedAt   string `json:"deleted_at"` // ISO 8601 UTC
}

// DeletedID is the event id of the deletion of one life of a record:
// the same on every retry of its delete (born is the record's creation
// time, so a record deleted, created again under the same id and deleted
// again is a second event).
func DeletedID(kind, domainID, id, born string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + domainID + "\x00" + id + "\x00" + born))
	return "deleted-" + hex.EncodeToString(sum[:16])
}

// Check reports what makes d unusable (the consumer drops it, logged).
func (d Deleted) Check() error {
	if !ValidID(d.ID) || d.DomainID == "" {
		return fmt.Errorf("deletion %q: no valid id or domain_id", d.ID)
	}
	switch {
	case d.Kind == DeletedUser && d.UserID != "":
	case d.Kind == DeletedWorkspace && d.WorkspaceID != "":
	case d.Kind == DeletedProject && d.ProjectID != "":
	default:
		return fmt.Errorf("deletion %s: kind %q without its id", d.ID, d.Kind)
	}
	return nil
}

// Owner selects the records d's user, workspace or project owned, by the
// suite's field names (domain_id and user_id, workspace_id or
// project_id): the filter of a cleanup's DeleteMany.
func (d Deleted) Owner() bson.D {
	switch d.Kind {
	case DeletedUser:
		return bson.D{{Key: "domain_id", Value: d.DomainID}, {Key: "user_id", Value: d.UserID}}
	case DeletedWorkspace:
		return bson.D{{Key: "domain_id", Value: d.DomainID}, {Key: "workspace_id", Value: d.WorkspaceID}}
	default:
		return bson.D{{Key: "domain_id", Value: d.DomainID}, {Key: "project_id", Value: d.ProjectID}}
	}
}

// Scoped reports whether d is a workspace's or a project's deletion
// (Owner then selects by workspace_id or project_id).
func (d Deleted) Scoped() bool { return d.Kind == DeletedWorkspace || d.Kind == DeletedProject }

// AddDeleted records d in the outbox (published on DeletedSubject).
func (o *Outbox) AddDeleted(ctx context.Context, d Deleted) error {
	if d.DeletedAt == "" {
		d.DeletedAt = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if err := d.Check(); err != nil {
		return err
	}
	return o.Add(ctx, DeletedSubject, d.ID, d)
}

// Cleanup is a service's rule for a deletion: it deletes what the service
// holds of d's user, workspace or project. It must be safe to run again
// (a redelivery, a retry after a failure half-way).
type Cleanup func(ctx context.Context, d Deleted) error

// DeletionWorkers is a service's deletion consumer as app.Service
// workers: one that runs ConsumeDeletions, or none, with a warning, when
// the service has no bus (its records of deleted owners then stay).
func DeletionWorkers(bus *Bus, service string, dead DeadLetter, log *slog.Logger, cleanup Cleanup) []func(context.Context) error {
	if log == nil {
		log = slog.Default()
	}
	if bus == nil {
		log.Warn(service + " runs without an event bus: a deleted user's, workspace's or project's records stay")
		return nil
	}
	return []func(context.Context) error{func(ctx context.Context) error { return ConsumeDeletions(ctx, bus, service, dead, log, cleanup) }}
}

// ConsumeDeletions runs cleanup for every deletion through service's
// durable consumer (DeletedConsumer) until ctx is done: done once
// cleanup returned nil, delivered again after a pause growing to a
// minute when it failed (unbounded: the delete must finish), and
// dead-lettered (dead) when it does not decode.
func ConsumeDeletions(ctx context.Context, bus *Bus, service string, dead DeadLetter, log *slog.Logger, cleanup Cleanup) error {
	if log == nil {
		log = slog.Default()
	}
	return Consume(ctx, bus, ConsumerSpec{Stream: DeletedStream, Consumer: jetstream.ConsumerConfig{
		Durable: DeletedConsumer(service), FilterSubject: DeletedSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 64,
	}, MaxDeliver: Unbounded, DeadLetter: dead, Heartbeat: true}, 1, func(ctx context.Context, m Delivery) Outcome {
		var d Deleted
		if err := json.Unmarshal(m.Data, &d); err != nil || d.Check() != nil {
			return Poison("not a deletion")
		}
		if err := cleanup(ctx, d); err != nil {
			log.Warn("deletion cleanup failed; delivered again", "service", service, "deletion", d.ID, "kind", d.Kind, "error", err.Error())
			return RetryAfter(min(time.Duration(m.Attempt)*time.Second, time.Minute), err)
		}
		return Done()
	})
}
