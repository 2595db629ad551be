package notification_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/notification"
	"github.com/nubes-io/nubes/services/notification/internal/dispatch"
	"github.com/nubes-io/nubes/services/notification/internal/fanout"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type M = map[string]any

var emailCapability = M{"supported_schema": []string{"email_smtp", "email_api"}, "data_type": "SECRET"}

// Plugins the fake repository knows.
var knownPlugins = map[string]testkit.RepoPlugin{
	"plugin-email-noti-protocol": {ResourceType: "notification.Protocol", Capability: emailCapability},
	"plugin-unreachable":         {ResourceType: "notification.Protocol", Capability: emailCapability},
	"plugin-offline-protocol":    {ResourceType: "notification.Protocol", Capability: emailCapability, Offline: true},
	"plugin-disabled-protocol":   {ResourceType: "notification.Protocol", State: "DISABLED", Capability: emailCapability},
	"plugin-no-schema-protocol":  {ResourceType: "notification.Protocol", Capability: M{"data_type": "PLAIN_TEXT"}},
	"plugin-grafana-mon-webhook": {ResourceType: "monitoring.Webhook"},
}

const (
	initMethod     = string(plugin.ProtocolInit)
	dispatchMethod = string(plugin.NotificationDispatch)
)

type env struct {
	anon, system, adminA, adminB, ownerA1, memberA1, userA *testkit.Client
	db                                                     *mongo.Database
	plugin                                                 *fakeplugin.Server
	bus                                                    *events.Bus
	handler                                                http.Handler
	identity                                               *testkit.Fake
	stopWorkers                                            context.CancelFunc // the replica's SIGTERM
	workersStopped                                         <-chan struct{}
	deps                                                   app.Deps            // to build a second replica
	cfg                                                    notification.Config // (a restart)
}

type options struct {
	bus      bool // start a NATS of the test's own and the dispatcher
	dispatch func(*dispatch.Config)
	now      func() time.Time // the fan-out's clock (schedule windows, inbox purge)
	purge    bool             // purge the inbox every 50 ms (entries of upstream's 60 days)
}

func setup(t *testing.T) *env { t.Helper(); return setupWith(t, options{}) }

func setupWith(t *testing.T, o options) *env {
	t.Helper()
	tk := testkit.Get()
	db := tk.Database(t)
	repo := testkit.FakeRepository(t, knownPlugins)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	fp.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"data_type": "PLAIN_TEXT", "data": M{"schema": M{"type": "object"}}}}})
	plugins := fakeplugin.Client(t, map[string]string{"plugin-email-noti-protocol": fp.Endpoint, "plugin-offline-protocol": fp.Endpoint,
		"plugin-unreachable": fakeplugin.Unreachable},
		plugin.Options{ReadyTimeout: 3 * time.Second, CallTimeout: 30 * time.Second, Retries: -1})
	keys, err := seal.Parse(seal.RandomSpec("k1"), "k1")
	if err != nil {
		t.Fatal(err)
	}
	identity := testkit.FakeIdentity(t, map[string]testkit.Project{
		"project-1": {DomainID: "domain-a", WorkspaceID: "workspace-1"}, "project-2": {DomainID: "domain-a", WorkspaceID: "workspace-1"},
		"project-9": {DomainID: "domain-a", WorkspaceID: "workspace-9"}, "project-b": {DomainID: "domain-b", WorkspaceID: "workspace-b"}})
	svcToken := tk.Token(t, auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "notification", Role: auth.SystemAdmin})
	deps := app.Deps{DB: db, Log: slog.New(slog.DiscardHandler), Services: call.NewServices(map[string]string{"repository": repo.URL, "identity": identity.URL}, svcToken, nil), Plugins: plugins}
	e := &env{db: db, plugin: fp, identity: identity}
	if o.bus {
		n := testkit.StartNATS(t)
		bus, err := events.Connect(context.Background(), n.URL(), "notification-test", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bus.Close)
		deps.Events, e.bus = bus, bus
	}
	cfg := notification.Config{Keys: keys, Dispatch: dispatch.Config{MaxDeliver: 3, Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		CallTimeout: 30 * time.Second, AckWait: time.Minute}}
	cfg.Fanout = fanout.Config{Now: o.now, MaxDeliver: 5, Backoff: 50 * time.Millisecond, AckWait: 10 * time.Second}
	if o.purge {
		cfg.Fanout.InboxKeep, cfg.Fanout.PurgeEvery = fanout.InboxKeep, 50*time.Millisecond
	}
	if o.dispatch != nil {
		o.dispatch(&cfg.Dispatch)
	}
	svc, err := notification.Build(context.Background(), deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.stopWorkers, e.workersStopped = testkit.RunWorkers(t, svc.Workers)
	e.deps, e.cfg = deps, cfg
	srv, err := server.New(server.Options{Name: "notification", Auth: tk.Verifier, Logger: slog.New(slog.DiscardHandler)}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	e.handler = srv.Handler()
	c := testkit.NewClient(t, e.handler)
	e.anon = c
	e.system = c.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin})
	e.adminA = c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	e.adminB = c.For(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin})
	e.ownerA1 = c.For(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"})
	e.memberA1 = c.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	e.userA = c.For(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User})
	return e
}

// count is the number of documents in a collection: the proof that a
// refused request stored nothing.
func (e *env) count(t *testing.T, coll string) int64 {
	t.Helper()
	return e.countWhere(t, coll, bson.D{})
}

// external is the number of EXTERNAL protocols stored (reads add each
// domain's built-in INTERNAL one).
func (e *env) external(t *testing.T) int64 {
	t.Helper()
	return e.countWhere(t, "notification_protocols", bson.D{{Key: "protocol_type", Value: "EXTERNAL"}})
}

func (e *env) countWhere(t *testing.T, coll string, filter bson.D) int64 {
	t.Helper()
	return testkit.Count(t, e.db.Collection(coll), filter...)
}

// raw reads a stored document by _id.
func (e *env) raw(t *testing.T, coll, id string) bson.M {
	t.Helper()
	return testkit.Raw(t, e.db.Collection(coll), id)
}

// Protocol is the ProtocolInfo as a client reads it.
type Protocol struct {
	ProtocolID   string `json:"protocol_id"`
	Name         string `json:"name"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	ResourceType string `json:"resource_type"`
	Capability   M      `json:"capability"`
	PluginInfo   struct {
		PluginID    string `json:"plugin_id"`
		Version     string `json:"version"`
		Options     M      `json:"options"`
		SecretID    string `json:"secret_id"`
		Schema      string `json:"schema"`
		Metadata    M      `json:"metadata"`
		UpgradeMode string `json:"upgrade_mode"`
	} `json:"plugin_info"`
	Usage struct {
		Sent    int `json:"sent"`
		Failed  int `json:"failed"`
		Skipped int `json:"skipped"`
	} `json:"usage"`
	Tags      M      `json:"tags"`
	DomainID  string `json:"domain_id"`
	CreatedAt string `json:"created_at"`
}

const base = "/notification/v1/protocol/"

// waitBound ends a poll for a condition that must come: only so that one
// never met fails the test. A minute, far above an idle run, so that a
// loaded machine does not fail a test that would have got there (the
// waits were 5-15 s; TestDispatchFailures failed once in 113 runs at load
// 20, its message not kept).
const waitBound = time.Minute

func (e *env) create(t *testing.T, c *testkit.Client, body M) Protocol {
	t.Helper()
	var p Protocol
	c.Call(base+"create", body).OK(&p)
	return p
}

func emailProtocol(name string) M {
	return M{"name": name, "plugin_info": M{"plugin_id": "plugin-email-noti-protocol", "options": M{"smtp_host": "mail.example.com"},
		"secret_data": M{"smtp_password": "hunter2-secret"}, "schema": "email_smtp"}, "tags": M{"team": "ops"}}
}
