package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

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
	at := time.Now().UTC().Add(-time.Duration(r.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Millisecond)
	return secretDoc{ID: id, UserSecretID: id, Name: fmt.Sprintf("%s %d", words[r.IntN(len(words))], n),
		SchemaID: "bench-form", Provider: "", Tags: map[string]any{"env": "bench"}, DomainID: domain, UserID: user,
		CreatedAt: at, UpdatedAt: at, EncryptOptions: map[string]any{}, Sealed: sealed}, nil
}

// seedSecrets stores secretCount secrets and returns the bench caller's.
func (b *bench) seedSecrets(ctx context.Context, c *mongo.Collection) ([]string, error) {
	progress("seeding %d user secrets", secretCount)
	r := rand.New(rand.NewPCG(7, 8))
	var mine []string
	for done := 0; done < secretCount; {
		docs := make([]any, min(seedBatch, secretCount-done))
		for i := range docs {
			domain, user := benchDomain, fmt.Sprintf("user-%02d", r.IntN(secretOwners))
			switch {
			case r.IntN(10) == 0:
				domain = otherDomain
			case r.IntN(secretOwners+1) == 0:
				user = "bench-admin"
			}
			s, err := newSecret(r, domain, user, done+i)
			if err != nil {
				return nil, err
			}
			if domain == benchDomain && user == "bench-admin" {
				mine = append(mine, s.ID)
			}
			docs[i] = s
		}
		if _, err := c.InsertMany(ctx, docs); err != nil {
			return nil, err
		}
		done += len(docs)
	}
	return mine, nil
}

// secretOperations: get and list of the secret service beside the driver
// doing the same queries.
func (b *bench) secretOperations(raw *mongo.Collection, ids []string) []operation {
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	// What query.Compile makes of the list request: the caller's scope,
	// domain and owner.
	listFilter := bson.D{{Key: "domain_id", Value: benchDomain}, {Key: "user_id", Value: "bench-admin"}}
	return []operation{
		{
			name: "secret-get", goal: 0.6,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/secret/v1/user-secret/get", map[string]string{"user_secret_id": pick(r, ids)}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				var d secretDoc
				return raw.FindOne(ctx, bson.D{{Key: "_id", Value: pick(r, ids)}}).Decode(&d)
			},
		},
		{
			name: "secret-list", goal: 0.8, scans: true,
			nubes: func(ctx context.Context, r *rand.Rand) error {
				return b.call(ctx, "/secret/v1/user-secret/list", map[string]any{"query": map[string]any{"page": map[string]int{"start": 1, "limit": 20}}}, nil)
			},
			raw: func(ctx context.Context, r *rand.Rand) error {
				if _, err := raw.CountDocuments(ctx, listFilter); err != nil {
					return err
				}
				cur, err := raw.Find(ctx, listFilter, options.Find().SetSort(bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: 1}}).SetSkip(0).SetLimit(20))
				if err != nil {
					return err
				}
				var rows []secretDoc
				return cur.All(ctx, &rows)
			},
		},
	}
}

// measureSecrets seeds the secrets and measures their operations (those
// named by -ops, or all); nil when -ops names none of them.
func (b *bench) measureSecrets(ctx context.Context, setup, raw *mongo.Collection) ([]result, error) {
	ops := b.secretOperations(raw, nil)
	if len(b.cfg.ops) > 0 && !slices.ContainsFunc(ops, func(o operation) bool { return slices.Contains(b.cfg.ops, o.name) }) {
		return nil, nil
	}
	ids, err := b.seedSecrets(ctx, setup)
	if err != nil {
		return nil, fmt.Errorf("seed secrets: %w", err)
	}
	var out []result
	for _, op := range b.secretOperations(raw, ids) {
		if len(b.cfg.ops) > 0 && !slices.Contains(b.cfg.ops, op.name) {
			out = append(out, result{op: op, skipped: "not asked for (-ops)"})
			continue
		}
		res, err := b.measureOp(ctx, op)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// printSecretTable is printTable's table for the user secrets.
func (b *bench) printSecretTable(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\n%d user secrets in the store (%d owners), %s per side, mongo pool %d\n",
		secretCount, secretOwners+1, b.cfg.duration, b.cfg.pool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tside\tcallers\tops/s\tp50 ms\tp99 ms\tops\terrors\tratio\tgoal\t")
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\tboth\t\t\t\t\t\t\t\tskipped: %s\t\n", r.op.name, r.skipped)
			continue
		}
		verdict := "met"
		if len(r.raw.lat) == 0 || r.ratio() < r.op.goal || r.nubes.errors > 0 {
			verdict = "MISSED"
		}
		for i, side := range []phase{r.nubes, r.raw} {
			name, ratio, goal := "nubes", fmt.Sprintf("%.3f", r.ratio()), fmt.Sprintf(">= %.1f %s", r.op.goal, verdict)
			if i == 1 {
				name, ratio, goal = "raw", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.2f\t%d\t%d\t%s\t%s\t\n", r.op.name, name, r.op.callers(b.cfg),
				side.opsPerSec(), side.percentile(.5), side.percentile(.99), len(side.lat), side.errors, ratio, goal)
		}
	}
	tw.Flush()
}
