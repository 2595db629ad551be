// Package fanout turns a notification request (events.NotificationRequest)
// into deliveries: it picks the targets' ENABLED channels that pass the
// level, subscription and schedule checks, keeps an inbox entry for each
// target user, renders upstream's message and publishes one
// events.NotificationDispatch per channel, which the dispatcher delivers
// (its retries, dead letters and usage counters). Every id it derives is
// a function of the request id, so a redelivered or republished request
// adds nothing: the stream drops a dispatch id it saw, the dispatcher
// never delivers one twice, and inbox entries are keyed the same way.
//
// A request is never dropped: one that breaks the contract or does not
// decode, or still cannot be fanned out at its last delivery, is
// published on events.NotificationDeadSubject (a DeadNotification with
// the request, kept in events.NotificationDeadStream) and recorded DEAD
// in core.RequestsCollection, as the dispatcher dead-letters its events.
//
// It holds no operation of the API; notification/create hands its
// requests to Handle.
package fanout

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification/internal/audience"
	"github.com/nubes-io/nubes/services/notification/internal/channel"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// Config bounds the consumer.
type Config struct {
	// Now is the clock of the schedule windows (UTC); nil: the real one.
	Now func() time.Time
	// MaxDeliver, Backoff: a request that cannot be fanned out (the store,
	// NATS or identity down) is tried again after Backoff, up to
	// MaxDeliver deliveries; then, or at once for a request that breaks
	// the contract, it is dead-lettered (events.NotificationDeadSubject
	// and core.RequestsCollection).
	MaxDeliver int
	Backoff    time.Duration
	AckWait    time.Duration
	// InboxKeep is how long an inbox entry is kept (upstream purges a
	// user's notifications after 60 days); PurgeEvery how often entries
	// older than that are deleted.
	InboxKeep, PurgeEvery time.Duration
	// MaxUsers and MaxChannels bound what one request reaches: at most
	// MaxUsers users (inbox entries) and MaxChannels deliveries; the
	// rest is left out (by id order, so a redelivery leaves out the same)
	// and logged. Zero: the defaults.
	MaxUsers, MaxChannels int
	// InboxMax bounds a user's inbox: past it, the oldest entries go
	// first. Zero: the default.
	InboxMax int
}

// Defaults of the bounds (docs/decisions.md, issue 38).
const (
	DefaultMaxUsers    = 100
	DefaultMaxChannels = 100
	DefaultInboxMax    = 1000
)

// DefaultConfig: 10 deliveries, 5 s apart; inbox entries kept 60 days,
// purged hourly, at most DefaultInboxMax a user; a request reaches at
// most DefaultMaxUsers users and DefaultMaxChannels channels.
func DefaultConfig() Config {
	return Config{MaxDeliver: 10, Backoff: 5 * time.Second, AckWait: time.Minute, InboxKeep: InboxKeep, PurgeEvery: time.Hour,
		MaxUsers: DefaultMaxUsers, MaxChannels: DefaultMaxChannels, InboxMax: DefaultInboxMax}
}

// InboxKeep is upstream's purge age of a user's notifications.
const InboxKeep = 60 * 24 * time.Hour

// Fanout consumes notification requests.
type Fanout struct {
	bus                                 *events.Bus
	identity                            *call.Client
	audience                            audience.Directory
	protocols, projectCh, userCh, inbox *mongo.Collection
	deadRecs                            *mongo.Collection
	cfg                                 Config
	log                                 *slog.Logger
}

// New builds the fan-out and its inbox indexes; identity is where a
// domain's admins are found (DomainAdmins requests).
func New(ctx context.Context, db *mongo.Database, bus *events.Bus, identity *call.Client, cfg Config, log *slog.Logger) (*Fanout, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.MaxUsers = cmp.Or(cfg.MaxUsers, DefaultMaxUsers)
	cfg.MaxChannels = cmp.Or(cfg.MaxChannels, DefaultMaxChannels)
	cfg.InboxMax = cmp.Or(cfg.InboxMax, DefaultInboxMax)
	f := &Fanout{bus: bus, identity: identity, audience: audience.Directory{Identity: identity}, protocols: db.Collection(core.ProtocolsCollection), projectCh: db.Collection(core.ProjectChannelsCollection),
		userCh: db.Collection(core.UserChannelsCollection), inbox: db.Collection(core.InboxCollection),
		deadRecs: db.Collection(core.RequestsCollection), cfg: cfg, log: log}
	return f, store.EnsureIndexes(ctx, f.inbox, store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "created_at", Value: -1}}})
}

// RunPurge deletes, every PurgeEvery until ctx is done, the inbox
// entries older than InboxKeep (by the fan-out's clock), so an inbox is
// bounded as upstream's is. Every replica runs it; deletes by age agree.
func (f *Fanout) RunPurge(ctx context.Context) error {
	if f.cfg.PurgeEvery <= 0 || f.cfg.InboxKeep <= 0 {
		return nil
	}
	t := time.NewTicker(f.cfg.PurgeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		before := wire.T(f.cfg.Now().Add(-f.cfg.InboxKeep))
		if _, err := f.inbox.DeleteMany(ctx, bson.D{{Key: "created_at", Value: bson.D{{Key: "$lt", Value: before}}}}); err != nil && ctx.Err() == nil {
			f.log.Warn("inbox purge failed; the next one tries again", "error", err.Error())
		}
	}
}

// Run consumes until ctx is done. NATS being down only pauses it.
func (f *Fanout) Run(ctx context.Context) error {
	return events.Consume(ctx, f.bus, events.ConsumerSpec{Stream: events.NotificationStream, Consumer: jetstream.ConsumerConfig{
		Durable:       events.NotificationRequestConsumer,
		FilterSubject: events.NotificationRequestSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       f.cfg.AckWait,
		MaxAckPending: 256,
	}, MaxDeliver: f.cfg.MaxDeliver, DeadLetter: f.dead}, Workers, f.handle)
}

// Workers is how many requests a replica fans out at once: each is
// written under its own ids (nothing is done twice), and one waiting on
// identity or the store does not hold the others back.
const Workers = 4

// Dead is the outcome recorded for a request given up on.
const Dead = "DEAD"

// Record is a request given up on, in core.RequestsCollection (_id = the
// request's ID, or "seq-<stream sequence>" when it had none).
type Record struct {
	ID         string    `bson:"_id"`
	DomainID   string    `bson:"domain_id,omitempty"`
	Topic      string    `bson:"topic,omitempty"`
	Outcome    string    `bson:"outcome"`
	Reason     string    `bson:"reason"`
	Deliveries int       `bson:"deliveries"`
	At         wire.Time `bson:"at"`
}

// handle says what became of one request: fanned out (done), a passing
// failure (retried), or one that never will be: it breaks the contract,
// does not decode, or is refused (dead-lettered, as the dispatcher's
// events are; so is one still failing at the last delivery).
func (f *Fanout) handle(ctx context.Context, m events.Delivery) events.Outcome {
	var r events.NotificationRequest
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return events.Poison("not JSON: " + err.Error())
	}
	err := f.Handle(ctx, r)
	if err == nil {
		return events.Done()
	}
	if e, ok := errs.As(err); ok && e.Status() < 500 {
		return events.Poison(err.Error())
	}
	return events.RetryAfter(f.cfg.Backoff, err)
}

// dead publishes the request on the dead-letter subject (kept 30 days in
// events.NotificationDeadStream) and records it in
// core.RequestsCollection; an error leaves the request to be tried again.
func (f *Fanout) dead(ctx context.Context, d events.Dead) error {
	var r *events.NotificationRequest
	if err := json.Unmarshal(d.Data, &r); err != nil {
		r = nil
	}
	dn := events.DeadNotification{Request: r, Reason: d.Reason, Deliveries: d.Attempt, FailedAt: wire.FormatTime(wire.Now())}
	rec := Record{Outcome: Dead, Reason: d.Reason, Deliveries: d.Attempt, At: wire.T(wire.Now())}
	if r != nil && events.ValidID(r.ID) {
		rec.ID, rec.DomainID, rec.Topic = r.ID, r.DomainID, r.Topic
	} else {
		if r == nil {
			dn.Raw = string(d.Data)
		}
		rec.ID = fmt.Sprintf("seq-%d", d.StreamSeq)
	}
	if err := f.bus.Publish(ctx, events.NotificationDeadSubject, "dead-request-"+rec.ID, dn); err != nil {
		return fmt.Errorf("notification request: dead-letter publish: %w", err)
	}
	if _, err := f.deadRecs.InsertOne(ctx, rec); err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("notification request: dead record: %w", err)
	}
	f.log.Warn("notification request dead-lettered", "id", rec.ID, "domain_id", rec.DomainID, "deliveries", d.Attempt, "reason", d.Reason)
	return nil
}

// Handle fans one request out. A request that breaks the contract is 400;
// the store or NATS failing is 503 (try again: nothing is done twice).
func (f *Fanout) Handle(ctx context.Context, r events.NotificationRequest) error {
	if err := r.Check(); err != nil {
		return errs.Invalid("notification request", err.Error())
	}
	if r.NotificationType == "" {
		r.NotificationType = events.NotifyInfo
	}
	if r.Level == "" {
		r.Level = events.LevelAll
	}
	now := f.cfg.Now().UTC()
	msg, err := Message(r.Message)
	if err != nil {
		return errs.Invalid("message", err.Error())
	}
	protocols := &protocolSet{f: f, domainID: r.DomainID}
	// Deliveries counts what the request reaches, up to MaxChannels.
	budget := &budget{left: f.cfg.MaxChannels}
	var named []string // users the built-in protocol's project channels name
	if r.ProjectID != "" {
		var chs []core.ProjectChannel
		if err := find(ctx, f.projectCh, bson.D{{Key: "domain_id", Value: r.DomainID}, {Key: "project_id", Value: r.ProjectID}, {Key: "state", Value: core.Enabled}}, &chs); err != nil {
			return err
		}
		slices.SortFunc(chs, func(a, b core.ProjectChannel) int { return cmp.Compare(a.ID, b.ID) })
		chs = slices.DeleteFunc(chs, func(c core.ProjectChannel) bool {
			return (r.Level != events.LevelAll && r.Level != c.NotificationLevel) ||
				!core.Picks(c.State, c.IsSubscribe, c.Subscriptions, c.IsScheduled, c.Schedule, r.Topic, now)
		})
		ids := make([]string, len(chs))
		for i, c := range chs {
			ids[i] = c.ProtocolID
		}
		if err := protocols.load(ctx, ids); err != nil {
			return err
		}
		for _, c := range chs {
			pr, ok := protocols.known[c.ProtocolID]
			if !ok {
				continue // its protocol was deleted
			}
			if pr.ProtocolType == core.Internal {
				// The built-in protocol reaches users, each as a user.
				named = append(named, channel.Users(c.Data)...)
				continue
			}
			if err := f.dispatch(ctx, budget, r, msg, c.ID, c.ProtocolID, c.Data, c.Sealed); err != nil {
				return err
			}
		}
	}
	// Checked again at send time: a user who left the project (or the
	// domain) since the channel was made is skipped.
	users := slices.Clone(r.UserIDs)
	if named = compact(named); len(named) > 0 {
		readers, err := f.audience.Readers(ctx, r.DomainID, r.ProjectID, named)
		if err != nil {
			return err
		}
		for _, u := range named {
			if _, ok := readers[u]; ok {
				users = append(users, u)
			} else {
				f.log.Info("notification: a channel's user cannot read the project; skipped", "id", r.ID, "user_id", u, "project_id", r.ProjectID)
			}
		}
	}
	// A domain's admins are asked of identity each time: a binding given
	// or taken away counts from the next request on.
	var admins []Admin
	if r.DomainAdmins {
		if admins, err = f.admins(ctx, r.DomainID); err != nil {
			return err
		}
		for _, a := range admins {
			users = append(users, a.UserID)
		}
	}
	if users = compact(users); len(users) == 0 {
		return nil
	}
	// Only ENABLED users of the domain: a made-up or deleted id gets no
	// inbox entry (and their identity answers the verified address).
	known, err := f.audience.Users(ctx, r.DomainID, users)
	if err != nil {
		return err
	}
	users = slices.DeleteFunc(users, func(u string) bool { _, ok := known[u]; return !ok })
	if len(users) > f.cfg.MaxUsers {
		f.log.Warn("notification request reaches more users than allowed; the rest is left out", "id", r.ID, "users", len(users), "max_users", f.cfg.MaxUsers)
		users = users[:f.cfg.MaxUsers]
	}
	if len(users) == 0 {
		return nil
	}
	// Every channel of the users, whatever its state: a user who made
	// one chose how to be reached, and is mailed by no other way.
	var chs []core.UserChannel
	if err := find(ctx, f.userCh, bson.D{{Key: "domain_id", Value: r.DomainID}, {Key: "user_id", Value: bson.D{{Key: "$in", Value: users}}}}, &chs); err != nil {
		return err
	}
	slices.SortFunc(chs, func(a, b core.UserChannel) int { return cmp.Compare(a.ID, b.ID) })
	ids := make([]string, len(chs))
	for i, c := range chs {
		ids[i] = c.ProtocolID
	}
	if err := protocols.load(ctx, ids); err != nil {
		return err
	}
	for _, u := range users {
		if err := f.keepInbox(ctx, r, msg, u); err != nil {
			return err
		}
	}
	reached := map[string]bool{}
	for _, c := range chs {
		reached[c.UserID] = true
		if !core.Picks(c.State, c.IsSubscribe, c.Subscriptions, c.IsScheduled, c.Schedule, r.Topic, now) {
			continue
		}
		pr, ok := protocols.known[c.ProtocolID]
		if !ok {
			continue
		}
		if address, _ := c.Data["email"].(string); pr.ProtocolType == core.Internal && !known[c.UserID].Proved(address) {
			// The owner's address changed or is no longer verified.
			f.log.Info("notification: an e-mail channel's address is not its owner's verified one; skipped", "id", r.ID, "user_channel_id", c.ID)
			continue
		}
		if err := f.dispatch(ctx, budget, r, msg, c.ID, c.ProtocolID, c.Data, c.Sealed); err != nil {
			return err
		}
	}
	// An admin with no channel of their own gets the notice by e-mail,
	// through the built-in protocol (the mailer), at the address identity
	// keeps, when verified (docs/decisions.md, "Notices to a domain's
	// admins", issue 38).
	for _, a := range admins {
		if reached[a.UserID] || !known[a.UserID].Proved(a.Email) {
			continue
		}
		internal, err := f.internal(ctx, protocols, r.DomainID)
		if err != nil {
			return err
		}
		if err := f.dispatch(ctx, budget, r, msg, "admin-mail:"+a.UserID, internal, map[string]any{"email": a.Email}, nil); err != nil {
			return err
		}
	}
	if budget.over > 0 {
		f.log.Warn("notification request reaches more channels than allowed; the rest is left out", "id", r.ID, "left_out", budget.over, "max_channels", f.cfg.MaxChannels)
	}
	return nil
}

// budget counts a request's deliveries against MaxChannels.
type budget struct{ left, over int }

// Identity's operations that name a domain's admins; a SYSTEM caller
// names the domain (domain_id).
const (
	RoleBindingListPath = "/identity/v2/role-binding/list"
	UserListPath        = "/identity/v2/user/list"
)

// Admin is a domain admin as a notice reaches them.
type Admin struct {
	UserID string `json:"user_id"`
	Email  string `json:"email"`
}

// admins are the ENABLED users of the domain bound to DOMAIN_ADMIN, with
// their e-mails, as identity answers the service credential.
func (f *Fanout) admins(ctx context.Context, domainID string) ([]Admin, error) {
	if f.identity == nil {
		return nil, errs.Down("The identity service", errors.New("no identity client"))
	}
	type binding struct {
		UserID   string `json:"user_id"`
		RoleType string `json:"role_type"`
		DomainID string `json:"domain_id"`
	}
	bs, err := call.ListAll(ctx, f.identity, RoleBindingListPath, map[string]any{"domain_id": domainID, "role_type": "DOMAIN_ADMIN"},
		func(b binding) bool { return b.RoleType == "DOMAIN_ADMIN" && b.DomainID == domainID })
	if err != nil || len(bs) == 0 {
		return nil, err
	}
	ids := map[string]bool{}
	for _, b := range bs {
		ids[b.UserID] = true
	}
	type user struct {
		Admin
		State    string `json:"state"`
		DomainID string `json:"domain_id"`
	}
	us, err := call.ListAll(ctx, f.identity, UserListPath, map[string]any{"domain_id": domainID, "state": "ENABLED"},
		func(u user) bool { return ids[u.UserID] && u.DomainID == domainID && u.State == "ENABLED" })
	if err != nil {
		return nil, err
	}
	out := make([]Admin, len(us))
	for i, u := range us {
		out[i] = u.Admin
	}
	return out, nil
}

// internal is the id of the domain's built-in protocol, stored now if no
// read has stored it yet (as the protocol service does on a first read).
func (f *Fanout) internal(ctx context.Context, protocols *protocolSet, domainID string) (string, error) {
	id := core.InternalID(domainID)
	if err := protocols.load(ctx, []string{id}); err != nil {
		return "", err
	}
	if _, ok := protocols.known[id]; ok {
		return id, nil
	}
	pr := core.InternalProtocol(domainID)
	if _, err := f.protocols.InsertOne(ctx, pr); err != nil && !mongo.IsDuplicateKeyError(err) {
		return "", store.Wrap(err)
	}
	protocols.known[id] = *pr
	return id, nil
}

// dispatch publishes the delivery of one request through one channel; a
// SECRET protocol's channel data travels sealed as the channel stores it.
func (f *Fanout) dispatch(ctx context.Context, b *budget, r events.NotificationRequest, msg map[string]any, channelID, protocolID string, data map[string]any, sealed *seal.Sealed) error {
	if b.left <= 0 {
		b.over++
		return nil
	}
	b.left--
	d := events.NotificationDispatch{ID: DispatchID(r.ID, channelID), DomainID: r.DomainID, ProtocolID: protocolID,
		NotificationType: r.NotificationType, Message: msg, ChannelData: wire.Object(data), ChannelID: channelID, SealedChannelData: sealed}
	if f.bus == nil {
		return errs.Down("The event bus", errNoBus)
	}
	if err := f.bus.Publish(ctx, events.NotificationDispatchSubject, d.ID, d); err != nil {
		return errs.Down("The event bus", err)
	}
	return nil
}

// keepInbox stores the user's inbox entry of the request, once, then
// trims the inbox to InboxMax, the oldest entries first.
func (f *Fanout) keepInbox(ctx context.Context, r events.NotificationRequest, msg map[string]any, userID string) error {
	id := "notification-" + hash(r.ID, userID)[:12]
	_, err := f.inbox.InsertOne(ctx, core.Inbox{ID: id, NotificationID: id, Topic: r.Topic, Message: msg, NotificationType: r.NotificationType,
		NotificationLevel: r.Level, UserID: userID, DomainID: r.DomainID, CreatedAt: wire.T(f.cfg.Now())})
	if mongo.IsDuplicateKeyError(err) {
		return nil
	}
	if err != nil {
		return store.Wrap(err)
	}
	return f.trimInbox(ctx, r.DomainID, userID)
}

// trimInbox deletes what is past the user's newest InboxMax entries.
// Two fan-outs trimming the same inbox at once delete the same oldest
// ones: each keeps the newest InboxMax it sees, and deletes are by _id.
func (f *Fanout) trimInbox(ctx context.Context, domainID, userID string) error {
	cur, err := f.inbox.Find(ctx, bson.D{{Key: "domain_id", Value: domainID}, {Key: "user_id", Value: userID}},
		options.Find().SetSort(bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}}).SetSkip(int64(f.cfg.InboxMax)).
			SetLimit(call.ListPageSize).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return store.Wrap(err)
	}
	var old []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &old); err != nil {
		return store.Wrap(err)
	}
	if len(old) == 0 {
		return nil
	}
	ids := make([]string, len(old))
	for i, o := range old {
		ids[i] = o.ID
	}
	_, err = f.inbox.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	return store.Wrap(err)
}

// protocolSet is what a request knows of its domain's live protocols:
// each read by its id when a channel first names it (by the _id index on
// every store), not the domain's whole list.
type protocolSet struct {
	f        *Fanout
	domainID string
	known    map[string]core.Protocol
	read     map[string]bool
}

// load reads the protocols of ids not read yet. One of another domain,
// or whose delete has begun (store.Teardown), is none.
func (s *protocolSet) load(ctx context.Context, ids []string) error {
	if s.known == nil {
		s.known, s.read = map[string]core.Protocol{}, map[string]bool{}
	}
	var todo []string
	for _, id := range compact(ids) {
		if !s.read[id] {
			todo = append(todo, id)
		}
	}
	docs, err := store.ByIDs[bson.Raw](ctx, s.f.protocols, todo)
	if err != nil {
		return err
	}
	for _, id := range todo {
		s.read[id] = true
		raw, ok := docs[id]
		if !ok || tenancy.IsMarked(raw) {
			continue
		}
		var p core.Protocol
		if err := bson.Unmarshal(raw, &p); err != nil {
			return store.Wrap(err)
		}
		if p.DomainID == s.domainID {
			s.known[id] = p
		}
	}
	return nil
}

func find(ctx context.Context, c *mongo.Collection, filter bson.D, out any) error {
	cur, err := c.Find(ctx, filter)
	if err != nil {
		return store.Wrap(err)
	}
	return store.Wrap(cur.All(ctx, out))
}

// DispatchID is the id of the dispatch of request id through a channel.
func DispatchID(requestID, channelID string) string {
	return "noti-" + hash(requestID, channelID)[:24]
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Message renders a request's message as upstream's message Struct: JSON
// values only (maps, lists, strings), absent members left out.
func Message(m events.NotificationMessage) (map[string]any, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(raw, &out)
}

func compact(s []string) []string {
	s = slices.DeleteFunc(s, func(v string) bool { return v == "" })
	slices.Sort(s)
	return slices.Compact(s)
}

var errNoBus = errors.New("no event bus")
