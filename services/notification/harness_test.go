package notification_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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
)

func TestMain(m *testing.M) { testkit.Main(m) }

type M = map[string]any

func writeError(w http.ResponseWriter, status int, code string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(M{"detail": M{"code": code, "message": "fake: " + code}})
}

// repoPlugin is a plugin the fake repository knows.
type repoPlugin struct {
	resourceType string
	state        string
	capability   M
}

var emailCapability = M{"supported_schema": []string{"email_smtp", "email_api"}, "data_type": "SECRET"}

// Plugins the fake repository knows.
var knownPlugins = map[string]repoPlugin{
	"plugin-email-noti-protocol": {"notification.Protocol", "ENABLED", emailCapability},
	"plugin-unreachable":         {"notification.Protocol", "ENABLED", emailCapability},
	"plugin-disabled-protocol":   {"notification.Protocol", "DISABLED", emailCapability},
	"plugin-no-schema-protocol":  {"notification.Protocol", "ENABLED", M{"data_type": "PLAIN_TEXT"}},
	"plugin-grafana-mon-webhook": {"monitoring.Webhook", "ENABLED", M{}},
}

// newFakeRepository answers plugin/get and plugin/get-versions for a
// verified bearer, as the repository service does.
func newFakeRepository(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := testkit.Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil {
			writeError(w, http.StatusUnauthorized, errs.AuthenticateFailure)
			return
		}
		var req struct {
			PluginID string `json:"plugin_id"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		rp, ok := knownPlugins[req.PluginID]
		if !ok { // as the repository service answers
			writeError(w, http.StatusNotFound, errs.NotFoundCode)
			return
		}
		switch r.URL.Path {
		case "/repository/v1/plugin/get":
			_ = json.NewEncoder(w).Encode(M{"plugin_id": req.PluginID, "name": req.PluginID, "resource_type": rp.resourceType,
				"capability": rp.capability, "state": rp.state})
		case "/repository/v1/plugin/get-versions":
			_ = json.NewEncoder(w).Encode(M{"results": []string{"1.2.0", "1.1.0"}, "total_count": 2})
		default:
			writeError(w, http.StatusNotFound, errs.UnsupportedAPI)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
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
}

type options struct {
	bus      bool // start a NATS of the test's own and the dispatcher
	dispatch func(*dispatch.Config)
}

func setup(t *testing.T) *env { t.Helper(); return setupWith(t, options{}) }

func setupWith(t *testing.T, o options) *env {
	t.Helper()
	tk := testkit.Get()
	db := tk.Database(t)
	repo := newFakeRepository(t)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	fp.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": M{"data_type": "PLAIN_TEXT", "data": M{"schema": M{"type": "object"}}}}})
	plugins, err := plugin.New(map[string]string{"plugin-email-noti-protocol": fp.Endpoint, "plugin-unreachable": "grpc://127.0.0.1:1"},
		plugin.Options{ReadyTimeout: 300 * time.Millisecond, CallTimeout: 2 * time.Second, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugins.Close() })
	keys, err := seal.Parse(seal.RandomSpec("k1"), "k1")
	if err != nil {
		t.Fatal(err)
	}
	deps := app.Deps{DB: db, Log: slog.New(slog.DiscardHandler), Services: call.NewServices(map[string]string{"repository": repo.URL}, "", nil), Plugins: plugins}
	e := &env{db: db, plugin: fp}
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
		CallTimeout: 2 * time.Second, AckWait: 10 * time.Second}}
	if o.dispatch != nil {
		o.dispatch(&cfg.Dispatch)
	}
	svc, err := notification.Build(context.Background(), deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(svc.Workers))
	for _, w := range svc.Workers {
		go func() { _ = w(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range svc.Workers {
			<-done
		}
	})
	srv, err := server.New(server.Options{Name: "notification", Auth: tk.Verifier, Logger: slog.New(slog.DiscardHandler)}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.NewClient(t, srv.Handler())
	tok := func(p auth.Principal) *testkit.Client { return c.As(tk.Token(t, p)) }
	e.anon = c
	e.system = tok(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-a", UserID: "root", Role: auth.SystemAdmin})
	e.adminA = tok(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	e.adminB = tok(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin})
	e.ownerA1 = tok(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"})
	e.memberA1 = tok(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	e.userA = tok(auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User})
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
	n, err := e.db.Collection(coll).CountDocuments(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// raw reads a stored document by _id.
func (e *env) raw(t *testing.T, coll, id string) bson.M {
	t.Helper()
	var m bson.M
	if err := e.db.Collection(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
		t.Fatalf("%s %s: %v", coll, id, err)
	}
	return m
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
