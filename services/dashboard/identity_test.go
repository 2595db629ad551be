package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/dashboard"
	"github.com/nubes-io/nubes/services/identity"
)

// TestWithRealIdentity checks the project against the identity service
// itself (in-process, over HTTP), not a fake: its project/get path, body
// and answer shape are what the dashboard expects.
func TestWithRealIdentity(t *testing.T) {
	t.Parallel()
	env := testkit.Get()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	bus, err := events.Connect(ctx, env.NATS.URL, "dashboard-test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	cipher, err := identity.NewCipher(identity.RandomCipherSpec())
	if err != nil {
		t.Fatal(err)
	}
	// identity signs with the kit's key, so the dashboard verifies its tokens.
	id, err := identity.Build(ctx, app.Deps{DB: env.Database(t), Events: bus, Log: log},
		identity.Config{Signer: env.Signer, Cipher: cipher, AdminUserID: "admin", AdminPassword: "Admin-Passw0rd"})
	if err != nil {
		t.Fatal(err)
	}
	isrv, err := server.New(server.Options{Name: "identity", Logger: log, Auth: id.Service.Auth, Documents: id.Service.Documents}, id.Service.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	ident := httptest.NewServer(isrv.Handler())
	t.Cleanup(ident.Close)

	sys := testkit.NewClient(t, isrv.Handler()).As(id.SystemToken)
	var ws struct {
		WorkspaceID string `json:"workspace_id"`
	}
	sys.Call("/identity/v2/workspace/create", map[string]any{"name": "Ops"}).OK(&ws)
	var pr struct {
		ProjectID string `json:"project_id"`
	}
	sys.Call("/identity/v2/project/create", map[string]any{"name": "Web", "workspace_id": ws.WorkspaceID}).OK(&pr)

	svc, err := dashboard.New(ctx, app.Deps{DB: env.Database(t), Log: log,
		Services: call.NewServices(map[string]string{"identity": ident.URL}, "", nil)})
	if err != nil {
		t.Fatal(err)
	}
	dsrv, err := server.New(server.Options{Name: "dashboard", Logger: log, Auth: env.Verifier}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	dash := testkit.NewClient(t, dsrv.Handler()).As(id.SystemToken)
	domain := id.Bootstrap.DomainID
	var d dashInfo
	dash.Call(prefix+"create", body(domain, "project_id", pr.ProjectID, "name", "Web", "viewers", "PUBLIC", "layouts", layout("a"))).OK(&d)
	if d.ProjectID != pr.ProjectID || d.DomainID != domain || d.Version != 1 {
		t.Fatalf("created on a real project: %+v", d)
	}
	dash.Call(prefix+"create", body(domain, "project_id", "project-000000000000", "name", "Ghost", "viewers", "PUBLIC")).
		Fails(http.StatusNotFound, errs.NotFoundCode)
	var l list[dashInfo]
	dash.Call(prefix+"list", body(domain)).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("list = %+v", l)
	}
	ident.Close()
	dash.Call(prefix+"create", body(domain, "project_id", pr.ProjectID, "name", "Down", "viewers", "PUBLIC")).
		Fails(http.StatusServiceUnavailable, errs.Unavailable)
}
