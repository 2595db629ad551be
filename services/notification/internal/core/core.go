// Package core holds what the notification service's parts share: the
// collections, the stored protocol, who may call, the repository client
// and the per-protocol delivery counters.
//
// It holds no operation of its own and never imports echo or nats.
package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Collections owned by the notification service.
const (
	ProtocolsCollection = "notification_protocols"
	// UsageCollection holds each protocol's delivery counters (_id =
	// protocol_id), written with $inc by the dispatcher only.
	UsageCollection = "notification_protocol_usage"
	// DispatchesCollection records each notification handled (_id = the
	// event's ID): a redelivered event is never dispatched twice.
	DispatchesCollection = "notification_dispatches"
	// DeadLettersCollection keeps the messages its consumers gave up on
	// (events.DeadRecords).
	DeadLettersCollection = "notification_dead_letters"
)

// Protocol states.
const (
	Enabled  = "ENABLED"
	Disabled = "DISABLED"
)

// Protocol types: EXTERNAL protocols are instances of a repository plugin;
// the one INTERNAL protocol of each domain is built in (see Internal).
const (
	External = "EXTERNAL"
	Internal = "INTERNAL"
)

// PluginKind is the kind of plugin a protocol runs on.
var PluginKind = pluginref.Kind{ResourceType: "notification.Protocol", Name: "notification protocol"}

var (
	// Readers may read protocols: upstream's DA, WO, WM and USER.
	Readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)
	// Writers may change them: a domain admin.
	Writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin)
)

// PluginInfo is a protocol's plugin.
type PluginInfo struct {
	pluginref.Info `bson:",inline"`
	SecretID       string `bson:"secret_id,omitempty" json:"secret_id,omitempty"`
	// Schema names the form of the secret data (one of the capability's
	// supported_schema); set with SecretID.
	Schema string `bson:"schema,omitempty" json:"schema,omitempty"`
}

// Usage counts a protocol's notifications: delivered by its plugin,
// given up on (dead-lettered), and skipped while it was DISABLED.
type Usage struct {
	Sent    int64 `bson:"sent" json:"sent"`
	Failed  int64 `bson:"failed" json:"failed"`
	Skipped int64 `bson:"skipped" json:"skipped"`
}

// Protocol is a protocol as stored. Its secret data is sealed in Sealed
// (bound to the protocol's id and domain) and never sent; Usage lives in
// UsageCollection and is filled in when read.
type Protocol struct {
	ID           string         `bson:"_id" json:"-"`
	ProtocolID   string         `bson:"protocol_id" json:"protocol_id"`
	Name         string         `bson:"name" json:"name"`
	State        string         `bson:"state" json:"state"`
	ProtocolType string         `bson:"protocol_type" json:"protocol_type"`
	ResourceType string         `bson:"resource_type" json:"resource_type"`
	Capability   map[string]any `bson:"capability" json:"capability"`
	PluginInfo   PluginInfo     `bson:"plugin_info" json:"plugin_info"`
	Sealed       *seal.Sealed   `bson:"sealed,omitempty" json:"-"`
	Usage        Usage          `bson:"-" json:"usage"`
	Tags         freeform.Flat  `bson:"tags" json:"tags"`
	DomainID     string         `bson:"domain_id" json:"domain_id"`
	CreatedAt    wire.Time      `bson:"created_at" json:"created_at"`
}

// AD binds a protocol's sealed secret data to its record.
func AD(protocolID, domainID string) []byte {
	return seal.AD(ProtocolsCollection, protocolID, domainID)
}

// SupportedSchema is the plugin's capability.supported_schema, and
// whether the plugin declares it at all (as a list of strings).
func SupportedSchema(p *pluginref.Plugin) ([]string, bool) {
	raw, ok := p.Capability["supported_schema"].([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(raw))
	for _, v := range raw {
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// Plugin returns a notification.Protocol plugin; another kind of plugin
// is 404, as an unknown one is, and either 404 names the kind (the
// repository's own message names none).
func Plugin(ctx context.Context, repo pluginref.Repository, pluginID string) (*pluginref.Plugin, error) {
	p, err := repo.Get(ctx, pluginID)
	if errs.Is(err, errs.NotFoundCode) {
		return nil, PluginKind.NotFound(pluginID)
	}
	return p, err
}

// Counters reads and adds to the usage counters.
type Counters struct{ C *mongo.Collection }

// Add adds to a protocol's counters in one atomic update.
func (c Counters) Add(ctx context.Context, protocolID string, u Usage) error {
	_, err := c.C.UpdateOne(ctx, bson.D{{Key: "_id", Value: protocolID}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "sent", Value: u.Sent}, {Key: "failed", Value: u.Failed}, {Key: "skipped", Value: u.Skipped}}}},
		options.UpdateOne().SetUpsert(true))
	return store.Wrap(err)
}

// Read returns the counters of the protocols.
func (c Counters) Read(ctx context.Context, ids []string) (map[string]Usage, error) {
	return store.ByIDs[Usage](ctx, c.C, ids)
}

// Forget deletes a protocol's counters: a child of its delete
// (store.DeleteChildren).
func (c Counters) Forget(ctx context.Context, protocolID string) error {
	return store.DeleteChildren(ctx, c.C, bson.D{{Key: "_id", Value: protocolID}})
}

// The built-in INTERNAL protocol: upstream creates one per domain on the
// first read ("SpaceONE User", resource_type identity.User, for the
// user channels that deliver to a user's in-app notifications). Nubes
// creates its own the same way, under its own name; it has no plugin and
// cannot be updated, re-plugged or deleted (enable and disable work).
const (
	InternalName   = "Nubes User"
	InternalSchema = "nubes_user"
)

// InternalID is the id of a domain's built-in protocol, derived from the
// domain so that concurrent first reads create it once.
func InternalID(domainID string) string {
	sum := sha256.Sum256([]byte("notification.internal-protocol\x00" + domainID))
	return "protocol-" + hex.EncodeToString(sum[:6])
}

// InternalProtocol is the domain's built-in protocol as first stored.
func InternalProtocol(domainID string) *Protocol {
	id := InternalID(domainID)
	return &Protocol{ID: id, ProtocolID: id, Name: InternalName, State: Enabled, ProtocolType: Internal,
		ResourceType: "identity.User", Capability: map[string]any{"supported_schema": []any{InternalSchema}},
		PluginInfo: PluginInfo{Info: pluginref.Info{Options: map[string]any{}, Metadata: map[string]any{"data_type": "PLAIN_TEXT"}, UpgradeMode: pluginref.Auto}},
		Tags:       map[string]any{}, DomainID: domainID, CreatedAt: wire.T(wire.Now())}
}
