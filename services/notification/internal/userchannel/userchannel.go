// Package userchannel holds the user channel operations
// (/notification/v1/user-channel/*): where a user's own notifications go.
// A user reaches only their own channels.
package userchannel

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification/internal/audience"
	"github.com/nubes-io/nubes/services/notification/internal/channel"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// Channel is the UserChannelInfo sent.
type Channel = core.UserChannel

// Resource declares user channels to the kit: owned by their user, the
// sealed data secret.
var Resource = query.Resource{
	KeywordFields: []string{"user_channel_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"user_channel_id", "name", "state", "protocol_id", "user_id"},
	Fields:        query.FieldsOf[Channel](),
	Maps:          freeform.FieldsOf[Channel](),
	Secret:        []string{"sealed"},
	Tenancy:       tenancy.Fields{Domain: "domain_id", Owner: "user_id"},
}

// users: every signed-in person, each for their own channels (upstream's
// USER scope: a token of any role is its user's).
var users = auth.Roles(auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)

type (
	createRequest struct {
		ProtocolID    string         `json:"protocol_id" v:"required,max=64"`
		Name          string         `json:"name" v:"required,max=255"`
		Data          map[string]any `json:"data" v:"required"`
		IsSubscribe   bool           `json:"is_subscribe"`
		Subscriptions []string       `json:"subscriptions" v:"max=100"`
		IsScheduled   bool           `json:"is_scheduled"`
		Schedule      *core.Schedule `json:"schedule"`
		Tags          freeform.Flat  `json:"tags"`
	}
	updateRequest struct {
		UserChannelID string         `json:"user_channel_id" v:"required"`
		Name          string         `json:"name" v:"max=255"`
		Data          map[string]any `json:"data"`
		Schedule      *core.Schedule `json:"schedule"`
		Tags          freeform.Flat  `json:"tags"`
	}
	scheduleRequest struct {
		UserChannelID string         `json:"user_channel_id" v:"required"`
		IsScheduled   bool           `json:"is_scheduled"`
		Schedule      *core.Schedule `json:"schedule"`
	}
	subscriptionRequest struct {
		UserChannelID string   `json:"user_channel_id" v:"required"`
		IsSubscribe   bool     `json:"is_subscribe"`
		Subscriptions []string `json:"subscriptions" v:"max=100"`
	}
	channelRequest struct {
		UserChannelID string `json:"user_channel_id" v:"required"`
	}
	channelQuery struct {
		Query         *query.Query `json:"query"`
		UserChannelID string       `json:"user_channel_id"`
		Name          string       `json:"name"`
		State         string       `json:"state" v:"enum=ENABLED|DISABLED"`
		ProtocolID    string       `json:"protocol_id"`
		UserID        string       `json:"user_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Channels serves the user channel operations.
type Channels struct {
	ops       channel.Ops[Channel]
	protocols *mongo.Collection
	audience  audience.Directory
	keys      *seal.Keyring
}

// New creates the collection's indexes; identity tells a user's verified
// e-mail address (channels of the built-in protocol).
func New(ctx context.Context, db *mongo.Database, identity *call.Client, keys *seal.Keyring) (*Channels, error) {
	c := db.Collection(core.UserChannelsCollection)
	cs := &Channels{ops: channel.Ops[Channel]{C: c, Resource: Resource, Key: "user_channel_id"},
		protocols: db.Collection(core.ProtocolsCollection), audience: audience.Directory{Identity: identity}, keys: keys}
	return cs, store.EnsureIndexes(ctx, c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "user_id", Value: 1}, {Key: "state", Value: 1}}})
}

// Routes are the operations.
func (cs *Channels) Routes() []api.Route {
	const base = "/notification/v1/user-channel/"
	return []api.Route{
		api.Op[createRequest, Channel]{Path: base + "create", Access: users, Summary: "Create one of your channels on an ENABLED protocol; data is checked against the protocol's schema (sealed when SECRET). The built-in protocol takes {email} and mails through the mailer.", Handle: cs.create},
		api.Op[updateRequest, Channel]{Path: base + "update", Access: users, Summary: "Change your channel's name, data, schedule or tags (protocol fixed).", Handle: cs.update},
		api.Op[scheduleRequest, Channel]{Path: base + "set-schedule", Access: users, Summary: "Set the channel's delivery window (UTC days and hours).", Handle: cs.setSchedule},
		api.Op[subscriptionRequest, Channel]{Path: base + "set-subscription", Access: users, Summary: "Set the topics the channel takes.", Handle: cs.setSubscription},
		api.Op[channelRequest, Channel]{Path: base + "enable", Access: users, Summary: "Enable the channel.", Handle: cs.state(core.Enabled)},
		api.Op[channelRequest, Channel]{Path: base + "disable", Access: users, Summary: "Disable the channel: nothing is dispatched to it.", Handle: cs.state(core.Disabled)},
		api.Op[channelRequest, api.Empty]{Path: base + "delete", Access: users, Summary: "Delete the channel and its sealed data.", Handle: cs.delete},
		api.Op[channelRequest, Channel]{Path: base + "get", Access: users, Summary: "Get one of your channels.", Handle: cs.get},
		api.Op[channelQuery, api.List[Channel]]{Path: base + "list", Access: users, Summary: "List your channels.", Handle: cs.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: users, Summary: "Statistics over your channels.", Handle: cs.stat},
	}
}

func (cs *Channels) create(ctx context.Context, p *auth.Principal, r *createRequest) (*Channel, error) {
	rule, err := tenancy.For(p, Resource.Tenancy)
	if err != nil {
		return nil, err
	}
	stamp := rule.Stamp()
	sch, err := channel.Schedule(r.IsScheduled, r.Schedule)
	if err != nil {
		return nil, err
	}
	subs, err := channel.Subscriptions(r.IsSubscribe, r.Subscriptions)
	if err != nil {
		return nil, err
	}
	pr, err := channel.Protocol(ctx, cs.protocols, stamp.Domain, r.ProtocolID, true)
	if err != nil {
		return nil, err
	}
	id := wire.NewID(core.UserChannelPrefix)
	data, sealed, err := channel.Data(pr, r.Data, true, cs.keys, id, stamp.Domain)
	if err != nil {
		return nil, err
	}
	if err := cs.checkEmail(ctx, pr, data, stamp.Domain, stamp.Owner); err != nil {
		return nil, err
	}
	doc := &Channel{ID: id, UserChannelID: id, Name: r.Name, State: core.Enabled, Data: data, IsSubscribe: r.IsSubscribe,
		Subscriptions: subs, IsScheduled: r.IsScheduled, Schedule: sch, Tags: wire.Object(r.Tags), ProtocolID: pr.ProtocolID,
		Sealed: sealed, UserID: stamp.Owner, DomainID: stamp.Domain, CreatedAt: wire.T(wire.Now())}
	if sealed != nil {
		doc.UserSecretID = wire.NewID("user-secret")
	}
	if _, err := cs.ops.C.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// checkEmail: an e-mail channel of the built-in protocol takes only its
// owner's verified address, as identity keeps it (user/list with the
// service credential). Any other address is 400: Nubes has no link that
// confirms a second address (docs/decisions.md, issue 38).
func (cs *Channels) checkEmail(ctx context.Context, pr *core.Protocol, data map[string]any, domainID, userID string) error {
	if pr.ProtocolType != core.Internal {
		return nil
	}
	address, _ := data["email"].(string)
	users, err := cs.audience.Users(ctx, domainID, []string{userID})
	if err != nil {
		return err
	}
	if u, ok := users[userID]; !ok || !u.Proved(address) {
		return errs.Invalid("data.email", "an e-mail channel delivers only to your own verified address: verify it in your profile (user-profile/verify-email) first")
	}
	return nil
}

func (cs *Channels) update(ctx context.Context, p *auth.Principal, r *updateRequest) (*Channel, error) {
	cur, err := store.GetToChange[Channel](ctx, cs.ops.C, Resource, p, "user_channel_id", r.UserChannelID)
	if err != nil {
		return nil, err
	}
	set := bson.D{}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if r.Schedule != nil {
		// upstream's user update takes a schedule: it schedules the channel.
		sch, err := channel.ScheduleSet(true, r.Schedule)
		if err != nil {
			return nil, err
		}
		set = append(set, sch...)
	}
	if r.Data != nil {
		pr, err := channel.Protocol(ctx, cs.protocols, cur.DomainID, cur.ProtocolID, false)
		if err != nil {
			return nil, err
		}
		data, sealed, err := channel.Data(pr, r.Data, true, cs.keys, cur.ID, cur.DomainID)
		if err != nil {
			return nil, err
		}
		if err := cs.checkEmail(ctx, pr, data, cur.DomainID, cur.UserID); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "data", Value: freeform.Map(data)}, bson.E{Key: "sealed", Value: sealed})
		if sealed != nil && cur.UserSecretID == "" {
			set = append(set, bson.E{Key: "user_secret_id", Value: wire.NewID("user-secret")})
		}
	}
	return cs.ops.Set(ctx, p, cur.ID, set)
}

func (cs *Channels) setSchedule(ctx context.Context, p *auth.Principal, r *scheduleRequest) (*Channel, error) {
	set, err := channel.ScheduleSet(r.IsScheduled, r.Schedule)
	if err != nil {
		return nil, err
	}
	return cs.ops.Set(ctx, p, r.UserChannelID, set)
}

func (cs *Channels) setSubscription(ctx context.Context, p *auth.Principal, r *subscriptionRequest) (*Channel, error) {
	set, err := channel.SubscriptionSet(r.IsSubscribe, r.Subscriptions)
	if err != nil {
		return nil, err
	}
	return cs.ops.Set(ctx, p, r.UserChannelID, set)
}

func (cs *Channels) state(state string) func(context.Context, *auth.Principal, *channelRequest) (*Channel, error) {
	return func(ctx context.Context, p *auth.Principal, r *channelRequest) (*Channel, error) {
		return cs.ops.Set(ctx, p, r.UserChannelID, channel.State(state))
	}
}

func (cs *Channels) delete(ctx context.Context, p *auth.Principal, r *channelRequest) (*api.Empty, error) {
	return cs.ops.Delete(ctx, p, r.UserChannelID)
}

func (cs *Channels) get(ctx context.Context, p *auth.Principal, r *channelRequest) (*Channel, error) {
	return cs.ops.Get(ctx, p, r.UserChannelID)
}

func (cs *Channels) list(ctx context.Context, p *auth.Principal, r *channelQuery) (*api.List[Channel], error) {
	q := query.With(r.Query, query.Params("user_channel_id", r.UserChannelID, "name", r.Name, "state", r.State,
		"protocol_id", r.ProtocolID, "user_id", r.UserID)...)
	return cs.ops.List(ctx, p, q)
}

func (cs *Channels) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	return cs.ops.Stat(ctx, p, r.Query)
}
