package identity_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity"
)

// TestGeneratedAdminPasswordNotLogged: a first start without
// admin_password generates one; the caller gets it, the log never holds
// it (at any level).
func TestGeneratedAdminPasswordNotLogged(t *testing.T) {
	env := testkit.Get()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testkit.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	bus, err := events.Connect(ctx, env.NATS.URL, "identity-test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	cipher, _ := identity.NewCipher(identity.RandomCipherSpec())
	built, err := identity.Build(ctx, app.Deps{DB: env.Database(t), Events: bus, Log: log},
		identity.Config{PasswordCost: bcrypt.MinCost, Signer: env.Signer, Cipher: cipher, AdminUserID: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	pw := built.Bootstrap.AdminPassword
	if !built.Bootstrap.Created || len(pw) < 12 {
		t.Fatalf("bootstrap created %v, generated password of %d characters", built.Bootstrap.Created, len(pw))
	}
	got := logs.String()
	if !strings.Contains(got, "admin password was generated") {
		t.Fatalf("the generation is not logged:\n%s", got)
	}
	if strings.Contains(got, pw) {
		t.Fatalf("the generated admin password is in the log:\n%s", got)
	}
}
