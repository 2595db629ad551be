package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nubes-io/nubes/pkg/testkit/cfctl"
)

// TestGRPCThroughTheImages: every service's image serves its operations
// over gRPC on 50051 as upstream's clients call them: reflection finds
// the service, the health service answers SERVING, and one operation
// answers with a token in metadata; no token is UNAUTHENTICATED with
// upstream's ERROR_CODE: message.
func TestGRPCThroughTheImages(t *testing.T) {
	// A domain admin identity made (identity checks its tokens' users).
	admin := rootAdmin(t, identityAt(t))
	domain, tok := admin.domain, admin.token
	for _, op := range []struct{ service, grpcService, method, body string }{
		{"identity", "spaceone.api.identity.v2.User", "list", `{}`},
		{"board", "spaceone.api.board.v1.Board", "list", `{}`},
		{"dashboard", "spaceone.api.dashboard.v1.ProjectDashboard", "list", `{"domain_id": "` + domain + `"}`},
		{"secret", "spaceone.api.user_secret.v1.UserSecret", "list", `{}`},
		{"repository", "spaceone.api.repository.v1.Plugin", "list", `{}`},
		{"monitoring", "spaceone.api.monitoring.v1.Webhook", "list", `{}`},
		{"notification", "spaceone.api.notification.v1.Protocol", "list", `{}`},
		{"cost-analysis", "spaceone.api.cost_analysis.v1.DataSource", "list", `{}`},
		{"inventory", "spaceone.api.inventory.v1.Collector", "list", `{}`},
		{"config", "spaceone.api.config.v1.DomainConfig", "list", `{}`},
	} {
		t.Run(op.service, func(t *testing.T) {
			needs(t, op.service)
			c := cfctl.Dial(t, st.first(t, op.service).grpc)
			found := false
			for _, s := range c.Services() {
				found = found || s == op.grpcService
			}
			if !found {
				t.Fatalf("reflection lists no %s", op.grpcService)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h, err := healthpb.NewHealthClient(c.Conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health: %v %v", h, err)
			}
			if out := c.OK(tok, op.grpcService, op.method, op.body, `"total_count":`); !strings.Contains(out, "results") {
				t.Fatalf("%s/%s answered %s", op.grpcService, op.method, out)
			}
			_, stat := c.Call("", op.grpcService, op.method, op.body)
			if stat == nil || stat.Code().String() != "Unauthenticated" || !strings.HasPrefix(stat.Message(), "ERROR_") {
				t.Fatalf("no token: %v", stat)
			}
		})
	}
}
