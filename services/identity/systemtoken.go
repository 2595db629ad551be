package identity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/services/identity/internal/bootstrap"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// SystemTokenCommand is the subcommand that prints the root domain's
// SYSTEM token: the service_token of the services that call others on no
// caller's behalf (inventory, cost analysis). A cluster has no other way
// to obtain one: identity issues it from the signing key and the root
// domain its first start recorded. It expires after system_token_ttl
// (30 days): print a new one before (docs/operations.md).
const SystemTokenCommand = "system-token"

// SystemTokenRequested reports whether the command line asks for it.
func SystemTokenRequested(args []string) bool { return len(args) > 1 && args[1] == SystemTokenCommand }

// SystemTokenMain is `identity system-token`: it reads identity's own
// configuration (signing key, store), prints the token on stdout and
// returns the exit code.
func SystemTokenMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var st BinarySettings
	err := config.LoadDeclared(&st)
	if err == nil {
		var cfg Config
		if cfg, err = st.Config(); err == nil {
			err = WriteSystemToken(ctx, st.Base, cfg.Signer, cfg.SystemTokenTTL, os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "identity %s: %v\n", SystemTokenCommand, err)
		return 1
	}
	return 0
}

// WriteSystemToken connects to the store of base, reads the root domain
// the bootstrap recorded and writes a SYSTEM token for it, signed by
// signer and valid for ttl (0: identity's default), as one line to out.
// Identity must have started once.
func WriteSystemToken(ctx context.Context, base config.Base, signer *auth.Signer, ttl time.Duration, out io.Writer) error {
	client, err := store.Connect(ctx, base.MongoURI, store.Options{MaxPoolSize: 1, OpTimeout: base.MongoTimeout})
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()
	return systemTokenFor(ctx, client.Database(base.MongoDatabase), signer, ttl, out)
}

func systemTokenFor(ctx context.Context, db *mongo.Database, signer *auth.Signer, ttl time.Duration, out io.Writer) error {
	var b bootstrap.Bootstrapped
	err := db.Collection(core.BootstrapCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "root"}}).Decode(&b)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return errors.New("no root domain yet: start identity once, then run this again")
	}
	if err != nil {
		return store.Wrap(err)
	}
	cfg := Config{SystemTokenTTL: ttl}
	cfg.Defaults()
	tok, err := signer.Issue(core.SystemPrincipal(b.DomainID), cfg.SystemTokenTTL)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, tok)
	return err
}
