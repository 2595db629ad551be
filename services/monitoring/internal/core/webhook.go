package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Webhook states.
const (
	Enabled  = "ENABLED"
	Disabled = "DISABLED"
)

// PluginInfo is a webhook's plugin: which one, its options and the
// metadata its init answered.
type PluginInfo = pluginref.Info

// Requests are a webhook's ingest counters.
type Requests struct {
	Total int64 `bson:"total" json:"total"`
	Error int64 `bson:"error" json:"error"`
}

// Webhook is a webhook as stored. Requests live in RequestsCollection and
// are filled in when it is read.
type Webhook struct {
	ID          string        `bson:"_id" json:"-"`
	WebhookID   string        `bson:"webhook_id" json:"webhook_id"`
	Name        string        `bson:"name" json:"name"`
	State       string        `bson:"state" json:"state"`
	AccessKey   string        `bson:"access_key" json:"access_key"`
	WebhookURL  string        `bson:"webhook_url" json:"webhook_url"`
	Capability  freeform.Map  `bson:"capability" json:"capability"`
	PluginInfo  PluginInfo    `bson:"plugin_info" json:"plugin_info"`
	Requests    Requests      `bson:"-" json:"requests"`
	Tags        freeform.Flat `bson:"tags" json:"tags"`
	DomainID    string        `bson:"domain_id" json:"domain_id"`
	WorkspaceID string        `bson:"workspace_id" json:"workspace_id"`
	ProjectID   string        `bson:"project_id" json:"project_id"`
	CreatedAt   wire.Time     `bson:"created_at" json:"created_at"`
}

// IngestPath is the ingest URL's path of a webhook.
func IngestPath(webhookID, accessKey string) string {
	return "/monitoring/v1/webhook/" + webhookID + "/" + accessKey + "/events"
}

// Counters buffers request counts in memory and adds them to
// RequestsCollection every flush interval with one $inc per webhook: an
// ingest call costs no write of its own, and counting never races a
// change of the webhook (another document). Replicas flush side by side:
// each $inc is atomic.
type Counters struct {
	C   *mongo.Collection
	Log *slog.Logger

	mu      sync.Mutex
	pending map[string]Requests
}

// Add counts one request of webhookID, failed or not.
func (c *Counters) Add(webhookID string, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]Requests{}
	}
	r := c.pending[webhookID]
	r.Total++
	if failed {
		r.Error++
	}
	c.pending[webhookID] = r
}

// Error counts one more error of a request already counted.
func (c *Counters) Error(webhookID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]Requests{}
	}
	r := c.pending[webhookID]
	r.Error++
	c.pending[webhookID] = r
}

// Run flushes every interval until ctx is done, then once more.
func (c *Counters) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.Flush(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
			c.Flush(ctx)
		}
	}
}

// Flush writes the buffered counts; counts that fail to write are kept
// for the next flush.
func (c *Counters) Flush(ctx context.Context) {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	for id, r := range batch {
		_, err := c.C.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "total", Value: r.Total}, {Key: "error", Value: r.Error}}}},
			options.UpdateOne().SetUpsert(true))
		if err != nil {
			c.Log.Warn("webhook counters not written; kept for the next flush", "webhook_id", id, "error", err.Error())
			c.mu.Lock()
			if c.pending == nil {
				c.pending = map[string]Requests{}
			}
			p := c.pending[id]
			p.Total += r.Total
			p.Error += r.Error
			c.pending[id] = p
			c.mu.Unlock()
		}
	}
}

// Read returns the stored counters of the webhooks.
func (c *Counters) Read(ctx context.Context, ids []string) (map[string]Requests, error) {
	return store.ByIDs[Requests](ctx, c.C, ids)
}

// Forget deletes a webhook's counters (after the webhook is deleted).
func (c *Counters) Forget(ctx context.Context, id string) error {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	return store.DeleteChildren(ctx, c.C, bson.D{{Key: "_id", Value: id}})
}

// WebhookKind is the kind of plugin a webhook runs on.
var WebhookKind = pluginref.Kind{ResourceType: "monitoring.Webhook", Name: "webhook"}

// A webhook's access key proves itself when the service has keys: it is
// the seal, under the suite's encryption keys, of nothing, bound to the
// webhook's id (pkg/seal's token form), so the ingest refuses a key that
// was not made for the webhook before it reads the store. Without keys,
// and for keys made before, it is upstream's 32 random hex characters,
// checked against the stored one only.
func keyAD(webhookID string) []byte { return seal.AD("monitoring.webhook-key", webhookID) }

// NewAccessKey makes the access key of a new webhook.
func NewAccessKey(keys *seal.Keyring, webhookID string) (string, error) {
	if keys == nil {
		var b [16]byte
		_, _ = rand.Read(b[:]) // never fails on a supported OS
		return hex.EncodeToString(b[:]), nil
	}
	s, err := keys.Seal(nil, keyAD(webhookID))
	if err != nil {
		return "", err
	}
	return seal.EncodeToken(s), nil
}

// KeyForm says what can be told of an access key before the store is
// read.
type KeyForm int

const (
	KeyRefused KeyForm = iota // neither form, or not made for this webhook by these keys
	KeyProven                 // made for this webhook by the service's keys
	KeyLegacy                 // upstream's random form: only the stored key tells
)

// CheckKey tells the form of key for the webhook, opening a proving key
// with keys (nil: no key proves itself).
func CheckKey(keys *seal.Keyring, webhookID, key string) KeyForm {
	if len(key) == 32 {
		if _, err := hex.DecodeString(key); err == nil {
			return KeyLegacy
		}
	}
	if keys == nil {
		return KeyRefused
	}
	s, err := seal.DecodeToken(key)
	if err != nil {
		return KeyRefused
	}
	if _, err := keys.Open(s, keyAD(webhookID)); err != nil {
		return KeyRefused
	}
	return KeyProven
}
