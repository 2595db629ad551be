// Package sealcmd is the `reseal` subcommand of every binary that seals
// data: `<binary> reseal [-batch N]` connects to the service's store with
// the binary's own configuration, seals every record that is not under the
// active key again with it (seal.ResealAll), and prints one JSON report per
// sealed field. The service keeps serving meanwhile; the command can be
// run again at any time (idempotent, resumable).
//
// It holds no service's rules: each service names its sealed fields.
package sealcmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
)

// Name is the subcommand's name.
const Name = "reseal"

// Keys are the key settings of a service that seals (squash them into its
// settings): encryption_keys "id:base64,...", encryption_keys_file (the
// same text in a file, e.g. a mounted Secret; merged with the former) and
// encryption_active_key (the id that seals; see seal.Parse when empty).
type Keys struct {
	EncryptionKeys      string `mapstructure:"encryption_keys" secret:"true" doc:"the keys that seal secrets (docs/operations.md)"`
	EncryptionKeysFile  string `mapstructure:"encryption_keys_file" doc:"a file holding encryption_keys"`
	EncryptionActiveKey string `mapstructure:"encryption_active_key" doc:"the key id new seals use"`
}

// KeyDefaults are the defaults of Keys (pkg/config: declared by its tags).
func KeyDefaults() map[string]any { return config.Defaults(&Keys{}) }

// Keyring loads the keys.
func (k Keys) Keyring() (*seal.Keyring, error) {
	return seal.Load(seal.Config{Keys: k.EncryptionKeys, KeysFile: k.EncryptionKeysFile, Active: k.EncryptionActiveKey})
}

// Requested reports whether the command line (os.Args) asks for reseal.
func Requested(args []string) bool { return len(args) > 1 && args[1] == Name }

// Main runs `reseal` with the arguments after its name and returns the
// exit code. load reads the binary's configuration and keys.
func Main(name string, args []string, load func() (config.Base, *seal.Keyring, error), targets func(*mongo.Database) []seal.Target) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fs := flag.NewFlagSet(name+" "+Name, flag.ContinueOnError)
	batch := fs.Int("batch", seal.DefaultBatch, "records read and re-sealed per step")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	base, k, err := load()
	if err == nil {
		err = Run(ctx, base, k, targets, *batch, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", name, Name, err)
		return 1
	}
	return 0
}

// Run connects to the store of base and re-seals every target, writing
// one JSON line per finished target to out. Records that no configured
// key opens are listed in the report's failed ids and make Run fail, so
// an operator never drops a key that still has records.
func Run(ctx context.Context, base config.Base, k *seal.Keyring, targets func(*mongo.Database) []seal.Target, batch int, out io.Writer) error {
	client, err := store.Connect(ctx, base.MongoURI, store.Options{MaxPoolSize: 4, OpTimeout: base.MongoTimeout})
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	reps, err := seal.ResealAll(ctx, k, targets(client.Database(base.MongoDatabase)), batch, nil)
	failed := 0
	enc := json.NewEncoder(out)
	for _, r := range reps {
		failed += len(r.Failed)
		_ = enc.Encode(r)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d records do not open with the configured keys (see failed); they keep their old key", failed)
	}
	return nil
}
