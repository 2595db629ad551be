package identity_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
)

// The token `identity system-token` prints speaks for the root domain as
// SYSTEM, on identity's own API; before the first start there is none.
func TestSystemTokenCommand(t *testing.T) {
	env := testkit.Get()
	ctx := context.Background()

	var out bytes.Buffer
	empty := env.Database(t)
	err := identity.WriteSystemToken(ctx, config.Base{MongoURI: env.Mongo.URI, MongoDatabase: empty.Name()}, env.Signer, 0, &out)
	if err == nil || !strings.Contains(err.Error(), "start identity once") || out.Len() != 0 {
		t.Fatalf("before bootstrap: err %v, out %q", err, out.String())
	}

	h := newHarness(t)
	if err := identity.WriteSystemToken(ctx, config.Base{MongoURI: env.Mongo.URI, MongoDatabase: h.DB.Name()}, env.Signer, 0, &out); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSuffix(out.String(), "\n")
	p, err := env.Verifier.Authenticate(ctx, tok)
	if err != nil || !p.IsSystem() || p.TokenType != auth.SystemToken || p.DomainID != h.Domain {
		t.Fatalf("token verifies as %+v (%v), want SYSTEM of %s", p, err, h.Domain)
	}
	// It is accepted where only SYSTEM callers may go.
	h.Anon.As(tok).Call("/identity/v2/domain/list", map[string]any{}).OK(nil)
}
