package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/wire"
)

// The secret service's collection and what the bench seeds in it: user
// secrets of many users of the bench domain (a tenth in another domain),
// sealed as the service seals them.
const (
	secretsCollection = "secret_user_secrets"
	secretCount       = 2000
	secretOwners      = 20 // users of the bench domain; the bench caller is one more
)

// benchKeys seals the seeded secrets; the service under test gets the same.
var benchKeys = func() *seal.Keyring {
	k, err := seal.Parse(seal.RandomSpec("bench"), "")
	if err != nil {
		panic(err)
	}
	return k
}()

// secretDoc is a user secret exactly as the secret service stores it.
type secretDoc struct {
	ID             string         `bson:"_id"`
	UserSecretID   string         `bson:"user_secret_id"`
	Name           string         `bson:"name"`
	SchemaID       string         `bson:"schema_id"`
	Provider       string         `bson:"provider"`
	Tags           map[string]any `bson:"tags"`
	DomainID       string         `bson:"domain_id"`
	UserID         string         `bson:"user_id"`
	CreatedAt      time.Time      `bson:"created_at"`
	UpdatedAt      time.Time      `bson:"updated_at"`
	Encrypted      bool           `bson:"encrypted"`
	EncryptOptions map[string]any `bson:"encrypt_options"`
	Sealed         seal.Sealed    `bson:"sealed"`
}

func newSecret(r *rand.Rand, domain, user string, n int) (secretDoc, error) {
	id := wire.NewID("user-secret")
	data := map[string]any{"user": fmt.Sprintf("svc-%d", n), "password": wire.NewID("pw"), "host": words[r.IntN(len(words))] + ".example.com"}
	// The service's associated data: collection, id, domain, owner.
	sealed, err := benchKeys.SealJSON(data, seal.AD(secretsCollection, id, domain, user))
	if err != nil {
		return secretDoc{}, err
	}
	at := pastYear(r)
	return secretDoc{ID: id, UserSecretID: id, Name: fmt.Sprintf("%s %d", words[r.IntN(len(words))], n),
		SchemaID: "bench-form", Provider: "", Tags: map[string]any{"env": "bench"}, DomainID: domain, UserID: user,
		CreatedAt: at, UpdatedAt: at, EncryptOptions: map[string]any{}, Sealed: sealed}, nil
}

// seedSecrets stores secretCount secrets and returns the bench caller's.
func (b *bench) seedSecrets(ctx context.Context, c *mongo.Collection) ([]string, error) {
	progress("seeding %d user secrets", secretCount)
	r := rand.New(rand.NewPCG(7, 8))
	var mine []string
	return mine, seedDocs(ctx, c, secretCount, func(n int) (any, error) {
		domain, user := benchDomain, fmt.Sprintf("user-%02d", r.IntN(secretOwners))
		switch {
		case r.IntN(10) == 0:
			domain = otherDomain
		case r.IntN(secretOwners+1) == 0:
			user = "bench-admin"
		}
		s, err := newSecret(r, domain, user, n)
		if err == nil && domain == benchDomain && user == "bench-admin" {
			mine = append(mine, s.ID)
		}
		return s, err
	})
}

// secretOperations: get and list of the secret service beside the driver
// doing the same queries.
func (b *bench) secretOperations(raw *mongo.Collection, ids []string) []operation {
	// What query.Compile makes of the list request: the caller's scope,
	// domain and owner.
	listFilter := func(*rand.Rand) bson.D {
		return bson.D{{Key: "domain_id", Value: benchDomain}, {Key: "user_id", Value: "bench-admin"}}
	}
	return []operation{
		{
			name: "secret-get", goal: 0.85,
			nubes: b.post("/secret/v1/user-secret/get", func(r *rand.Rand) any { return map[string]string{"user_secret_id": pickID(r, ids)} }),
			raw:   rawGet[secretDoc](raw, ids),
		},
		{
			name: "secret-list", goal: 0.8, scans: true,
			nubes: b.post("/secret/v1/user-secret/list", func(*rand.Rand) any { return pageOf() }),
			raw:   rawList[secretDoc](raw, listFilter, bson.E{Key: "created_at", Value: -1}),
		},
	}
}

// measureSecrets seeds the secrets and measures their operations (those
// named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureSecrets(ctx context.Context, setup, raw *mongo.Collection) ([]result, error) {
	return b.measureGroup(ctx, "secrets", func(ctx context.Context) ([]string, error) { return b.seedSecrets(ctx, setup) },
		func(ids []string) []operation { return b.secretOperations(raw, ids) })
}

// printSecretTable is printTable's table for the user secrets.
func (b *bench) printSecretTable(w io.Writer, rs []result) {
	b.printGroup(w, fmt.Sprintf("%d user secrets in the store (%d owners)", secretCount, secretOwners+1), rs)
}
