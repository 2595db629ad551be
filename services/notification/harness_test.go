package notification_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
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
	people                                                 *directory
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
	// The fan-out's bounds (0: the defaults).
	maxUsers, maxChannels, inboxMax int
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
	e := &env{db: db, plugin: fp, identity: identity, people: serveDirectory(identity)}
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
	cfg.Fanout.MaxUsers, cfg.Fanout.MaxChannels, cfg.Fanout.InboxMax = o.maxUsers, o.maxChannels, o.inboxMax
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

// directory is what the fake identity answers of users, role bindings
// and projects to the service credential (user/list, role-binding/list,
// project/list naming domain_id), as identity does; a test changes it
// to give or take access.
type directory struct {
	mu       sync.Mutex
	users    map[string]dirUser    // by user id
	bindings map[string][]dirBind  // by user id
	projects map[string]dirProject // by project id
}

type dirUser struct {
	domain, state, email string
	verified             bool
}

type dirBind struct{ role, workspace string } // workspace "" for the domain

type dirProject struct {
	domain, workspace, kind string
	users                   []string
}

// serveDirectory: domain-a's alice (domain admin), olga (owner of
// workspace-1), mia and ulla (members of workspace-1), wendy (member of
// workspace-9), pia (member of workspace-1 listed in project-2 only);
// domain-b's bob. project-1 is PUBLIC, project-2 PRIVATE.
func serveDirectory(f *testkit.Fake) *directory {
	d := &directory{
		users: map[string]dirUser{
			"alice": {"domain-a", "ENABLED", "alice@a.example.com", true}, "olga": {"domain-a", "ENABLED", "olga@a.example.com", true},
			"mia": {"domain-a", "ENABLED", "mia@a.example.com", true}, "ulla": {"domain-a", "ENABLED", "ulla@example.com", true},
			"wendy": {"domain-a", "ENABLED", "wendy@a.example.com", true}, "pia": {"domain-a", "ENABLED", "pia@a.example.com", false},
			"bob": {"domain-b", "ENABLED", "bob@b.example.com", true},
		},
		bindings: map[string][]dirBind{"alice": {{"DOMAIN_ADMIN", ""}}, "olga": {{"WORKSPACE_OWNER", "workspace-1"}},
			"mia": {{"WORKSPACE_MEMBER", "workspace-1"}}, "ulla": {{"WORKSPACE_MEMBER", "workspace-1"}},
			"wendy": {{"WORKSPACE_MEMBER", "workspace-9"}}, "pia": {{"WORKSPACE_MEMBER", "workspace-1"}}, "bob": {{"DOMAIN_ADMIN", ""}}},
		projects: map[string]dirProject{"project-1": {"domain-a", "workspace-1", "PUBLIC", nil}, "project-2": {"domain-a", "workspace-1", "PRIVATE", []string{"pia"}},
			"project-9": {"domain-a", "workspace-9", "PUBLIC", nil}, "project-b": {"domain-b", "workspace-b", "PUBLIC", nil}},
	}
	service := func(p *auth.Principal) error {
		if !p.IsService() {
			return errs.Forbidden()
		}
		return nil
	}
	// The ids of a query's {user_id in [...]} filter; nil: every user.
	idsOf := func(req map[string]any) map[string]bool {
		q, _ := req["query"].(map[string]any)
		fs, _ := q["filter"].([]any)
		for _, c := range fs {
			if c, _ := c.(map[string]any); c["k"] == "user_id" && c["o"] == "in" {
				out := map[string]bool{}
				for _, v := range c["v"].([]any) {
					out[v.(string)] = true
				}
				return out
			}
		}
		return nil
	}
	list := func(rows []M) (any, error) { return M{"results": rows, "total_count": len(rows)}, nil }
	f.Handle(fanout.UserListPath, func(p *auth.Principal, req map[string]any) (any, error) {
		if err := service(p); err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		ids, rows := idsOf(req), []M{}
		for id, u := range d.users {
			if u.domain == testkit.Str(req, "domain_id") && (ids == nil || ids[id]) && (testkit.Str(req, "state") == "" || testkit.Str(req, "state") == u.state) {
				rows = append(rows, M{"user_id": id, "state": u.state, "email": u.email, "email_verified": u.verified, "domain_id": u.domain})
			}
		}
		return list(rows)
	}).Handle(fanout.RoleBindingListPath, func(p *auth.Principal, req map[string]any) (any, error) {
		if err := service(p); err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		ids, rows := idsOf(req), []M{}
		for id, bs := range d.bindings {
			for _, b := range bs {
				if d.users[id].domain == testkit.Str(req, "domain_id") && (ids == nil || ids[id]) && (testkit.Str(req, "role_type") == "" || testkit.Str(req, "role_type") == b.role) {
					rows = append(rows, M{"user_id": id, "role_type": b.role, "workspace_id": b.workspace, "domain_id": d.users[id].domain})
				}
			}
		}
		return list(rows)
	}).Handle("/identity/v2/project/list", func(p *auth.Principal, req map[string]any) (any, error) {
		if err := service(p); err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		rows := []M{}
		for id, pr := range d.projects {
			if pr.domain == testkit.Str(req, "domain_id") && (testkit.Str(req, "project_id") == "" || testkit.Str(req, "project_id") == id) {
				rows = append(rows, M{"project_id": id, "project_type": pr.kind, "users": pr.users, "workspace_id": pr.workspace, "domain_id": pr.domain})
			}
		}
		return list(rows)
	})
	return d
}

// set changes the directory under its lock.
func (d *directory) set(fn func(d *directory)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fn(d)
}
