// Package events is the contract of Nubes events over NATS JetStream: every
// stream, subject, consumer and bucket is listed here, payloads are typed
// structs that only ever gain fields, and every publish carries a
// Nats-Msg-Id so the stream drops duplicates. Consumers must be idempotent
// by event id.
//
// It must not hold business rules; services decide what to publish.
//
// # Connection
//
// Connect does not fail when NATS is unreachable at start: the connection
// retries in the background (forever, once a second), and the streams are
// created on the first publish, or by a consumer's setup, after the
// connection comes up (and again after every reconnect, which is cheap and
// idempotent). A service that only produces events through an Outbox
// therefore starts and serves while NATS is down, and its events go out
// when NATS returns. Connect still fails on a malformed URL, and when NATS
// answers but refuses the streams (JetStream disabled, a conflicting
// stream): those are configuration errors that retrying does not fix.
//
// While disconnected, a publish fails at once instead of queueing in the
// client's reconnect buffer (ReconnectBufSize -1): a caller that needs the
// event out retries it itself (the Outbox relay does), and a message is
// never published twice behind the caller's back after it gave up.
//
// # Outbox
//
// An operation that must lead to an event (an e-mail) records the event
// with Outbox.Enqueue (any other event: Outbox.Add) in the same database
// it writes to, before it answers; the relay, Outbox.Run, which the
// owning service lists among its app.Service workers, publishes it to
// JetStream. See outbox.go for the delivery argument.
//
// # Consuming
//
// Every worker that reads a durable consumer does it through Consume: it
// waits for NATS and the streams, creates the consumer from the caller's
// ConsumerSpec, and runs N workers that pull one message at a time and
// pass it to the caller's handler as a Delivery, until ctx is done; a
// lost consumer is created again. The handler answers Done, RetryAfter
// or Poison, and Consume alone acks, naks with a delay, bounds the
// deliveries (ConsumerSpec.MaxDeliver), dead-letters (DeadLetter;
// DeadRecords for a service with a database) and terminates, and beats
// while a long handler runs. See consume.go.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/seal"
)

// Streams, subjects, consumers and buckets.
const (
	MailStream  = "NUBES_MAIL"
	MailSubject = "nubes.mail.send" // payload Mail, Nats-Msg-Id = Mail.ID

	// MailDeadStream keeps the mails the mailer gave up on, longer than
	// MailStream keeps mails, for an operator to inspect and replay.
	MailDeadStream  = "NUBES_MAIL_DEAD"
	MailDeadSubject = "nubes.mail.dead" // payload DeadMail, Nats-Msg-Id = "dead-" + Mail.ID

	// MailConsumer is the mailer's durable consumer on MailStream.
	MailConsumer = "mailer"
	// MailSentBucket is the mailer's key-value bucket of sent mail ids
	// (key: Mail.ID), its exactly-once record.
	MailSentBucket = "mail_sent"

	JobStream  = "NUBES_JOBS"
	JobSubject = "nubes.job.>" // nubes.job.<service>
	// IdentityJobSubject carries identity's trusted-account sync jobs
	// (payload: identity's TrustedSyncEvent, Nats-Msg-Id = job_id), read
	// by the durable IdentitySyncConsumer of every identity replica.
	IdentityJobSubject   = "nubes.job.identity"
	IdentitySyncConsumer = "identity-sync"

	// CostTaskSubject carries the tasks of cost-analysis jobs, a work
	// queue read by the durable CostTaskConsumer (any replica takes a
	// task; one not acknowledged in time is delivered again): payload
	// CostTask, Nats-Msg-Id = CostTask.JobTaskID.
	CostTaskSubject  = "nubes.job.cost-analysis"
	CostTaskConsumer = "cost-analysis"

	// MonitoringStream carries the events webhooks received.
	MonitoringStream = "NUBES_MONITORING"
	// MonitoringEventSubject: payload MonitoringEvent, Nats-Msg-Id =
	// event_id (a first receipt) or event_id-<updated ms> (an update).
	MonitoringEventSubject = "nubes.monitoring.event"

	// NotificationStream carries the notifications to deliver through a
	// notification protocol's plugin.
	NotificationStream = "NUBES_NOTIFICATION"
	// NotificationDispatchSubject: payload NotificationDispatch,
	// Nats-Msg-Id = NotificationDispatch.ID.
	NotificationDispatchSubject = "nubes.notification.dispatch"
	// NotificationDeadStream keeps the notifications the notification
	// service gave up on, for an operator to inspect and replay.
	NotificationDeadStream  = "NUBES_NOTIFICATION_DEAD"
	NotificationDeadSubject = "nubes.notification.dead" // payload DeadNotification, Nats-Msg-Id = "dead-" + ID
	// NotificationConsumer is the notification service's durable consumer.
	NotificationConsumer = "notification"
	// NotificationRequestSubject is the one way any service asks for a
	// notification: payload NotificationRequest, Nats-Msg-Id =
	// NotificationRequest.ID, published through the producer's Outbox
	// (Outbox.Add). It rides on NotificationStream.
	NotificationRequestSubject = "nubes.notification.request"
	// NotificationRequestConsumer is the notification service's durable
	// consumer of NotificationRequestSubject: it picks the channels and
	// publishes one NotificationDispatch per channel.
	NotificationRequestConsumer = "notification-request"

	// InventoryTaskStream is the work queue of inventory collection tasks
	// (WorkQueue retention: a message is gone once a worker acks it; any
	// replica of inventory takes the next one).
	InventoryTaskStream = "NUBES_INVENTORY_TASKS"
	// InventoryTaskSubject: payload InventoryTask, Nats-Msg-Id =
	// InventoryTask.ID.
	InventoryTaskSubject = "nubes.inventory.task"
	// InventoryTaskConsumer is the inventory workers' durable consumer.
	InventoryTaskConsumer = "inventory"

	// DuplicateWindow is how long a stream remembers a Nats-Msg-Id.
	DuplicateWindow = 10 * time.Minute
)

// Mail templates the mailer renders (in the user's language: en, ko; other
// languages fall back to en). An unknown template renders as a generic
// notice of its Data. The Data keys each template reads are listed with
// it; the mailer refuses (dead-letters) a mail that lacks a required key.
//
// Keys every template may use: "name" (greeting; falls back to
// "user_id"), "user_id", "domain_name".
const (
	// MailInvite: a user was created with reset_password. Required: one of
	// "link" (a console link carrying a token), "token", or
	// "temporary_password". Optional: "expires_hours".
	MailInvite = "invite"
	// MailVerifyEmail: confirm an e-mail address. Required: "code" (6
	// digits). Optional: "expires_minutes".
	MailVerifyEmail = "verify_email"
	// MailMFACode: a one-time code for MFA. Required: "code" (6 digits).
	// Optional: "purpose" (enable | disable | login), "expires_minutes".
	MailMFACode = "mfa_code"
	// MailResetPassword: password reset. Required: one of "link" or
	// "temporary_password". Optional: "expires_hours".
	MailResetPassword = "reset_password"
	// MailNotification: a notification to an e-mail channel of the
	// built-in protocol. Required: "title". Optional: "description",
	// "tags" (lines "Key: value"), "link", "callback_label",
	// "callback_url" (the message's first callback, an acknowledge link).
	MailNotification = "notification"
	// MailGeneric: any other notice. Optional: "subject", "body"; without
	// "body" every Data key is listed.
	MailGeneric = "generic"
)

// Mail asks the mailer to send one e-mail.
type Mail struct {
	ID       string            `json:"id"` // also the Nats-Msg-Id and the Message-ID
	To       string            `json:"to"`
	Language string            `json:"language"` // en, ko
	Template string            `json:"template"`
	Data     map[string]string `json:"data"` // never a SecretMailKeys key once sealed
	// Secret holds the SecretMailKeys of Data sealed (SealMail), opened by
	// the mailer at send time.
	Secret *seal.Sealed `json:"secret,omitempty"`
	// TokenID names the token or code the mail carries (a link's token
	// id, else the mail id): logs name it, never the secret.
	TokenID string `json:"token_id,omitempty"`
}

// DeadMail is published on MailDeadSubject when the mailer gives up on a
// mail: undecodable or unrenderable (at once), refused permanently by the
// SMTP server, or still failing after the delivery bound.
type DeadMail struct {
	ID         string `json:"id"`             // Mail.ID when known
	Mail       *Mail  `json:"mail,omitempty"` // nil when the payload did not decode
	Raw        string `json:"raw,omitempty"`  // the payload as received, when it did not decode
	Reason     string `json:"reason"`
	Deliveries uint64 `json:"deliveries"` // how many times the mailer received it
	StreamSeq  uint64 `json:"stream_seq"` // its sequence in MailStream
	FailedAt   string `json:"failed_at"`  // ISO 8601 UTC
}

// MonitoringEvent is an event a webhook received, as monitoring stored it
// (the raw body stays in monitoring: event/get).
type MonitoringEvent struct {
	EventID     string   `json:"event_id"`
	EventKey    string   `json:"event_key"`
	EventType   string   `json:"event_type"` // ALERT, RECOVERY, ERROR
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Severity    string   `json:"severity"`
	Resources   []string `json:"resources"`
	Provider    string   `json:"provider"`
	Account     string   `json:"account"`
	OccurredAt  string   `json:"occurred_at"` // ISO 8601 UTC
	WebhookID   string   `json:"webhook_id"`
	ProjectID   string   `json:"project_id"`
	WorkspaceID string   `json:"workspace_id"`
	DomainID    string   `json:"domain_id"`
	ReceivedAt  string   `json:"received_at"` // ISO 8601 UTC
}

// NotificationDispatch asks the notification service to deliver one
// message through a protocol of a domain (its plugin's
// Notification.dispatch). ID is chosen by the publisher and makes a
// redelivery or a second publish harmless: one ID is dispatched at most
// once.
type NotificationDispatch struct {
	ID               string         `json:"id"`
	DomainID         string         `json:"domain_id"`
	ProtocolID       string         `json:"protocol_id"`
	NotificationType string         `json:"notification_type"` // INFO, ERROR, SUCCESS, WARNING
	Message          map[string]any `json:"message"`           // title (required), description, link, tags, ...
	ChannelData      map[string]any `json:"channel_data"`      // where to deliver (e-mail addresses, a webhook URL, ...)
	// ChannelID names the channel a NotificationRequest picked (empty
	// for a push); SealedChannelData is then that channel's secret data
	// as the channel stores it (a SECRET protocol), opened by the
	// dispatcher for the call only and used instead of ChannelData.
	ChannelID         string       `json:"channel_id,omitempty"`
	SealedChannelData *seal.Sealed `json:"sealed_channel_data,omitempty"`
}

// Notification levels and types of a NotificationRequest.
const (
	// LevelAll reaches every channel whatever its level (upstream's ALL).
	LevelAll = "ALL"
	// NotifyInfo, NotifyError, NotifySuccess and NotifyWarning are the
	// notification types (upstream's NotificationType, NONE excluded).
	NotifyInfo    = "INFO"
	NotifyError   = "ERROR"
	NotifySuccess = "SUCCESS"
	NotifyWarning = "WARNING"
)

// NotificationRequest asks the notification service to notify: upstream's
// Notification.create made an event. The service picks the ENABLED
// channels of the targets that pass the subscription (Topic), schedule
// and level checks, keeps an inbox entry for each target user, renders
// Message as upstream's message Struct and dispatches it through each
// channel's protocol (NotificationDispatch, or the mailer for e-mail
// channels of the built-in protocol).
//
// Targets (at least one): ProjectID (the project's channels), UserIDs
// (those users' channels and inboxes), DomainAdmins (the domain admins',
// as users). ID is the producer's dedup id (ValidID): a request published
// twice with one ID notifies once; each (request, channel) pair is
// dispatched at most once.
type NotificationRequest struct {
	ID           string   `json:"id"`
	DomainID     string   `json:"domain_id"`
	WorkspaceID  string   `json:"workspace_id,omitempty"`
	ProjectID    string   `json:"project_id,omitempty"`
	UserIDs      []string `json:"user_ids,omitempty"`
	DomainAdmins bool     `json:"domain_admins,omitempty"`
	// Topic is what subscriptions name: monitoring.Alert, inventory.Job,
	// cost_analysis.Job, ...
	Topic string `json:"topic"`
	// NotificationType: NotifyInfo (default), NotifyError, NotifySuccess,
	// NotifyWarning.
	NotificationType string `json:"notification_type"`
	// Level: LevelAll (default) or LV1..LV10; a project channel takes a
	// request of its own level only (docs/decisions.md).
	Level   string              `json:"notification_level"`
	Message NotificationMessage `json:"message"`
}

// NotificationMessage is upstream's message Struct
// (plugin-protocols.md 6): title is required.
type NotificationMessage struct {
	Title            string            `json:"title"`
	Description      string            `json:"description,omitempty"`
	ShortDescription string            `json:"short_description,omitempty"`
	Link             string            `json:"link,omitempty"`
	ImageURL         string            `json:"image_url,omitempty"`
	Tags             []MessageTag      `json:"tags,omitempty"`
	Callbacks        []MessageCallback `json:"callbacks,omitempty"`
	OccurredAt       string            `json:"occurred_at,omitempty"` // ISO 8601 UTC
}

// MessageTag is one tag of a message ("Alert Number": "#3").
type MessageTag struct {
	Key     string         `json:"key"`
	Value   string         `json:"value"`
	Options map[string]any `json:"options,omitempty"`
}

// MessageCallback is one action of a message (label "Acknowledge", the
// signed link that acknowledges the alert).
type MessageCallback struct {
	Label   string         `json:"label"`
	URL     string         `json:"url"`
	Options map[string]any `json:"options,omitempty"`
}

// CostTask asks a cost-analysis worker to run one task of a cost job
// (Cost.get_data of the task's data source). The task itself is read from
// the store by its id.
type CostTask struct {
	JobTaskID    string `json:"job_task_id"`
	JobID        string `json:"job_id"`
	DataSourceID string `json:"data_source_id"`
	DomainID     string `json:"domain_id"`
}

// DeadNotification is published on NotificationDeadSubject when a
// notification cannot be delivered.
//
// A notification request (NotificationRequestSubject) the service gave up
// on is dead-lettered the same way: Request holds it (Raw its payload
// when it did not decode) and Notification is empty; republishing
// Request on NotificationRequestSubject replays it.
type DeadNotification struct {
	Notification NotificationDispatch `json:"notification"`
	Request      *NotificationRequest `json:"request,omitempty"`
	Raw          string               `json:"raw,omitempty"`
	Reason       string               `json:"reason"`
	Deliveries   int                  `json:"deliveries"`
	FailedAt     string               `json:"failed_at"` // ISO 8601 UTC
}

// InventoryTask asks an inventory worker to run one job task of a
// collection (SubTask < 0: ask the plugin for its sub-tasks and queue
// them) or one of its sub-tasks (Collector.collect). ID is
// "<job_task_id>" for the task and "<job_task_id>-<n>" for sub-task n;
// the worker records each sub-task's outcome under that id, so a
// redelivery never counts twice.
type InventoryTask struct {
	ID        string `json:"id"`
	JobID     string `json:"job_id"`
	JobTaskID string `json:"job_task_id"`
	DomainID  string `json:"domain_id"`
	SubTask   int    `json:"sub_task"`
}

// StreamConfigs are the streams Nubes uses, created idempotently, each
// stored on replicas servers of the NATS cluster (1 for a single server).
func StreamConfigs(replicas int) []jetstream.StreamConfig {
	replicas = max(replicas, 1)
	return []jetstream.StreamConfig{
		// Work queue: a mail leaves the stream once the mailer acked it.
		{Name: MailStream, Subjects: []string{MailSubject}, Retention: jetstream.WorkQueuePolicy, Duplicates: DuplicateWindow, MaxAge: 7 * 24 * time.Hour, Replicas: replicas},
		{Name: MailDeadStream, Subjects: []string{MailDeadSubject}, Duplicates: DuplicateWindow, MaxAge: 30 * 24 * time.Hour, Replicas: replicas},
		{Name: JobStream, Subjects: []string{JobSubject}, Duplicates: DuplicateWindow, MaxAge: 7 * 24 * time.Hour, Replicas: replicas},
		{Name: MonitoringStream, Subjects: []string{MonitoringEventSubject}, Duplicates: DuplicateWindow, MaxAge: 7 * 24 * time.Hour, Replicas: replicas},
		{Name: NotificationStream, Subjects: []string{NotificationDispatchSubject, NotificationRequestSubject}, Duplicates: DuplicateWindow, MaxAge: 7 * 24 * time.Hour, Replicas: replicas},
		{Name: NotificationDeadStream, Subjects: []string{NotificationDeadSubject}, Duplicates: DuplicateWindow, MaxAge: 30 * 24 * time.Hour, Replicas: replicas},
		{Name: InventoryTaskStream, Subjects: []string{InventoryTaskSubject}, Retention: jetstream.WorkQueuePolicy, Duplicates: DuplicateWindow, MaxAge: 7 * 24 * time.Hour, Replicas: replicas},
		// Limits retention: every service's consumer reads each deletion.
		{Name: DeletedStream, Subjects: []string{DeletedSubject}, Duplicates: DuplicateWindow, MaxAge: DeletedMaxAge, Replicas: replicas},
	}
}

// streamOwners are the services that create and update each stream: the
// ones that publish into it (a producer's messages need the stream). Any
// other service only binds to it (its consumers wait for it), and the
// Helm chart's NATS users may create and update only their own
// (templates/_flows.tpl; pkg/events TestChartNATSUsers checks the two
// agree).
var streamOwners = map[string][]string{
	MailStream:             {"identity", "notification"},
	MailDeadStream:         {"mailer"},
	JobStream:              {"identity", "cost-analysis"},
	MonitoringStream:       {"monitoring"},
	NotificationStream:     {"notification", "inventory", "cost-analysis", "monitoring"},
	NotificationDeadStream: {"notification"},
	InventoryTaskStream:    {"inventory"},
	DeletedStream:          {"identity"},
}

// natsConsumersOnly are the suite's NATS users that own no stream: they
// only consume (identity's deletions).
var natsConsumersOnly = []string{"secret", "dashboard", "config"}

// OwnedStreams are the streams service creates and updates, in
// StreamConfigs order (none for a service that only consumes); ok is
// false for a service that is not one of the suite's NATS users (it owns
// every stream: the devstack, tests).
func OwnedStreams(service string) (streams []string, ok bool) {
	for _, sc := range StreamConfigs(1) {
		if owners, known := streamOwners[sc.Name]; known && slices.Contains(owners, service) {
			streams = append(streams, sc.Name)
		}
	}
	return streams, len(streams) > 0 || slices.Contains(natsConsumersOnly, service)
}

// WithStreams makes the Bus create and update only the named streams
// (OwnedStreams); without it, it ensures every stream.
func WithStreams(names ...string) Option {
	return func(b *Bus) { b.streams = names; b.onlyOwned = true }
}

// errRetentionChange is NATS' answer to an update that would turn a
// stream into a work queue or back (JSStreamInvalidConfigF, "can not
// change retention policy to/from workqueue").
const errRetentionChange jetstream.ErrorCode = 10052

// Option changes how Connect sets the Bus up.
type Option func(*Bus)

// WithReplicas stores the streams on n servers of a NATS cluster (3 is
// what a cluster that must survive the loss of one server wants).
func WithReplicas(n int) Option { return func(b *Bus) { b.replicas = n } }

// WithUser connects as a NATS user (the server's authorization block);
// an empty user connects without one, or with the URL's user info. Its
// replies, fetched messages included, come to the inbox prefix
// InboxPrefix(user), so a user allowed only its own prefix reads no other
// user's.
func WithUser(user, password string) Option {
	return func(b *Bus) { b.user, b.password = user, password }
}

// InboxPrefix is where a NATS user's replies come: _INBOX.<user>.
func InboxPrefix(user string) string { return "_INBOX." + user }

// Bus is a JetStream connection with the Nubes streams in place.
type Bus struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	log      *slog.Logger
	replicas int

	user, password string

	streams   []string // the streams this Bus ensures, when onlyOwned
	onlyOwned bool

	streamsOK atomic.Bool // streams ensured since the last (re)connect
	ensureMu  sync.Mutex  // one EnsureStreams at a time

	mu          sync.Mutex
	reconnected chan struct{} // closed and replaced on each (re)connect
}

// Connect dials NATS and creates the streams. When NATS cannot be reached
// it returns a Bus that keeps reconnecting in the background (see the
// package comment); it fails only on errors that retrying cannot fix.
func Connect(ctx context.Context, url, name string, log *slog.Logger, opts ...Option) (*Bus, error) {
	if log == nil {
		log = slog.Default()
	}
	b := &Bus{log: log, reconnected: make(chan struct{})}
	for _, o := range opts {
		o(b)
	}
	auth := []nats.Option{nats.Name("nubes-" + name)}
	if b.user != "" {
		auth = append(auth, nats.UserInfo(b.user, b.password), nats.CustomInboxPrefix(InboxPrefix(b.user)))
	}
	nc, err := nats.Connect(url, append(auth,
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err.Error())
			}
		}),
		nats.ConnectHandler(func(*nats.Conn) { log.Info("nats connected"); b.onConnect() }),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected"); b.onConnect() }))...)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b.NC, b.JS = nc, js
	if !nc.IsConnected() {
		log.Warn("nats not reachable at start; retrying in the background", "service", name)
		return b, nil
	}
	if err := b.EnsureStreams(ctx); err != nil {
		if nc.IsConnected() { // NATS answered and refused: configuration
			nc.Close()
			return nil, err
		}
		log.Warn("nats lost while creating streams; retrying in the background", "error", err.Error())
	}
	return b, nil
}

func (b *Bus) onConnect() {
	b.streamsOK.Store(false) // a restarted server may have lost them; re-creating is idempotent
	b.mu.Lock()
	close(b.reconnected)
	b.reconnected = make(chan struct{})
	b.mu.Unlock()
}

// Reconnected returns a channel closed at the next (re)connect to NATS, so
// a worker that waits for NATS wakes at once when it returns.
func (b *Bus) Reconnected() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reconnected
}

// Connected reports whether the connection is up right now.
func (b *Bus) Connected() bool { return b.NC.IsConnected() }

// EnsureStreams creates or updates the Nubes streams. It is cheap once
// done: the result is remembered until the next reconnect.
func (b *Bus) EnsureStreams(ctx context.Context) error {
	if b.streamsOK.Load() {
		return nil
	}
	b.ensureMu.Lock()
	defer b.ensureMu.Unlock()
	if b.streamsOK.Load() {
		return nil
	}
	for _, sc := range StreamConfigs(b.replicas) {
		if b.onlyOwned && !slices.Contains(b.streams, sc.Name) {
			continue // another service's: bound to, never changed
		}
		_, err := b.JS.CreateOrUpdateStream(ctx, sc)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errRetentionChange && sc.Retention == jetstream.WorkQueuePolicy {
			// A stream made before it was a work queue: NATS cannot change
			// its retention in place. It keeps working as it was (the
			// mailer deletes each mail it is done with); an operator
			// recreates it when it is empty (docs/operations.md).
			b.log.Warn("stream keeps its old retention; recreate it when empty to make it a work queue", "stream", sc.Name, "error", err.Error())
			continue
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	b.streamsOK.Store(true)
	return nil
}

// Publish sends payload (as JSON) on subject with id as Nats-Msg-Id and
// returns once the stream stored it (or dropped it as a duplicate).
func (b *Bus) Publish(ctx context.Context, subject, id string, payload any) error {
	data, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	return b.PublishData(ctx, subject, id, data)
}

// PublishData is Publish for a payload already encoded.
func (b *Bus) PublishData(ctx context.Context, subject, id string, data []byte) error {
	if !b.NC.IsConnected() {
		return fmt.Errorf("publish %s: %w", subject, nats.ErrDisconnected)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		return err
	}
	_, err := b.JS.Publish(ctx, subject, data, jetstream.WithMsgID(id))
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		b.streamsOK.Store(false) // the stream vanished: create it on the next try
	}
	if err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// Close drains the connection (or closes it when it never came up).
func (b *Bus) Close() {
	if err := b.NC.Drain(); err != nil {
		b.NC.Close()
	}
}
