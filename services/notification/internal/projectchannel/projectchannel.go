// Package projectchannel holds the project channel operations
// (/notification/v1/project-channel/*): where a project's notifications
// go, through which protocol, at which level, when and for which topics.
package projectchannel

import (
	"context"
	"fmt"

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

// Channel is the ProjectChannelInfo sent.
type Channel = core.ProjectChannel

// Resource declares project channels to the kit: in a project, the
// sealed data secret.
var Resource = query.Resource{
	KeywordFields: []string{"project_channel_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"project_channel_id", "name", "state", "notification_level", "protocol_id", "project_id"},
	Fields:        query.FieldsOf[Channel](),
	Maps:          freeform.FieldsOf[Channel](),
	Secret:        []string{"sealed"},
	Tenancy:       tenancy.InProject,
}

var (
	// writers: upstream's WORKSPACE_OWNER and WORKSPACE_MEMBER (a member
	// in its projects only, by the tenancy rule).
	writers = auth.Roles(auth.WorkspaceOwner, auth.WorkspaceMember)
	// readers: also the domain admin.
	readers = auth.Roles(auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
)

type (
	createRequest struct {
		ProtocolID        string         `json:"protocol_id" v:"required,max=64"`
		Name              string         `json:"name" v:"required,max=255"`
		Data              map[string]any `json:"data" v:"required"`
		IsSubscribe       bool           `json:"is_subscribe"`
		Subscriptions     []string       `json:"subscriptions" v:"max=100"`
		NotificationLevel string         `json:"notification_level" v:"enum=LV1|LV2|LV3|LV4|LV5|LV6|LV7|LV8|LV9|LV10"`
		IsScheduled       bool           `json:"is_scheduled"`
		Schedule          *core.Schedule `json:"schedule"`
		Tags              freeform.Flat  `json:"tags"`
		ProjectID         string         `json:"project_id" v:"required,max=64"`
	}
	updateRequest struct {
		ProjectChannelID  string         `json:"project_channel_id" v:"required"`
		Name              string         `json:"name" v:"max=255"`
		Data              map[string]any `json:"data"`
		NotificationLevel string         `json:"notification_level" v:"enum=LV1|LV2|LV3|LV4|LV5|LV6|LV7|LV8|LV9|LV10"`
		Tags              freeform.Flat  `json:"tags"`
	}
	scheduleRequest struct {
		ProjectChannelID string         `json:"project_channel_id" v:"required"`
		IsScheduled      bool           `json:"is_scheduled"`
		Schedule         *core.Schedule `json:"schedule"`
	}
	subscriptionRequest struct {
		ProjectChannelID string   `json:"project_channel_id" v:"required"`
		IsSubscribe      bool     `json:"is_subscribe"`
		Subscriptions    []string `json:"subscriptions" v:"max=100"`
	}
	channelRequest struct {
		ProjectChannelID string `json:"project_channel_id" v:"required"`
	}
	channelQuery struct {
		Query             *query.Query `json:"query"`
		ProjectChannelID  string       `json:"project_channel_id"`
		Name              string       `json:"name"`
		State             string       `json:"state" v:"enum=ENABLED|DISABLED"`
		NotificationLevel string       `json:"notification_level" v:"enum=LV1|LV2|LV3|LV4|LV5|LV6|LV7|LV8|LV9|LV10"`
		ProtocolID        string       `json:"protocol_id"`
		ProjectID         string       `json:"project_id"`
		WorkspaceID       string       `json:"workspace_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Channels serves the project channel operations.
type Channels struct {
	ops       channel.Ops[Channel]
	protocols *mongo.Collection
	identity  *call.Client
	audience  audience.Directory
	keys      *seal.Keyring
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database, identity *call.Client, keys *seal.Keyring) (*Channels, error) {
	c := db.Collection(core.ProjectChannelsCollection)
	cs := &Channels{ops: channel.Ops[Channel]{C: c, Resource: Resource, Key: "project_channel_id"},
		protocols: db.Collection(core.ProtocolsCollection), identity: identity, audience: audience.Directory{Identity: identity}, keys: keys}
	return cs, store.EnsureIndexes(ctx, c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "state", Value: 1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "workspace_id", Value: 1}}},
	)
}

// Routes are the operations.
func (cs *Channels) Routes() []api.Route {
	const base = "/notification/v1/project-channel/"
	return []api.Route{
		api.Op[createRequest, Channel]{Path: base + "create", Access: writers, Summary: "Create a project channel on an ENABLED protocol; data is checked against the protocol's schema (sealed when the protocol's data is SECRET).", Handle: cs.create},
		api.Op[updateRequest, Channel]{Path: base + "update", Access: writers, Summary: "Change a project channel's name, data, level or tags (protocol and project fixed).", Handle: cs.update},
		api.Op[scheduleRequest, Channel]{Path: base + "set-schedule", Access: writers, Summary: "Set the channel's delivery window (UTC days and hours).", Handle: cs.setSchedule},
		api.Op[subscriptionRequest, Channel]{Path: base + "set-subscription", Access: writers, Summary: "Set the topics the channel takes.", Handle: cs.setSubscription},
		api.Op[channelRequest, Channel]{Path: base + "enable", Access: writers, Summary: "Enable the channel.", Handle: cs.state(core.Enabled)},
		api.Op[channelRequest, Channel]{Path: base + "disable", Access: writers, Summary: "Disable the channel: nothing is dispatched to it.", Handle: cs.state(core.Disabled)},
		api.Op[channelRequest, api.Empty]{Path: base + "delete", Access: writers, Summary: "Delete the channel and its sealed data.", Handle: cs.delete},
		api.Op[channelRequest, Channel]{Path: base + "get", Access: readers, Summary: "Get a project channel.", Handle: cs.get},
		api.Op[channelQuery, api.List[Channel]]{Path: base + "list", Access: readers, Summary: "List the project channels the caller reaches.", Handle: cs.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: readers, Summary: "Statistics over the project channels the caller reaches.", Handle: cs.stat},
	}
}

// project is what a channel needs of identity's ProjectInfo.
type project struct {
	ProjectID   string `json:"project_id"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

func (cs *Channels) create(ctx context.Context, p *auth.Principal, r *createRequest) (*Channel, error) {
	rule, err := tenancy.For(p, Resource.Tenancy)
	if err != nil {
		return nil, err
	}
	// The project, as identity lets the caller see it (404 for another
	// domain's, workspace's or an unknown one).
	var pj project
	if err := cs.identity.Call(ctx, "/identity/v2/project/get", map[string]string{"project_id": r.ProjectID}, &pj); err != nil {
		return nil, err
	}
	if pj.ProjectID != r.ProjectID || pj.DomainID != p.DomainID {
		return nil, errs.NotFound("project_id", r.ProjectID)
	}
	if err := rule.Admits(tenancy.Record{Domain: p.DomainID, Workspace: pj.WorkspaceID, Project: pj.ProjectID}); err != nil {
		return nil, err
	}
	sch, err := channel.Schedule(r.IsScheduled, r.Schedule)
	if err != nil {
		return nil, err
	}
	subs, err := channel.Subscriptions(r.IsSubscribe, r.Subscriptions)
	if err != nil {
		return nil, err
	}
	pr, err := channel.Protocol(ctx, cs.protocols, p.DomainID, r.ProtocolID, true)
	if err != nil {
		return nil, err
	}
	id := wire.NewID(core.ProjectChannelPrefix)
	data, sealed, err := channel.Data(pr, r.Data, false, cs.keys, id, p.DomainID)
	if err != nil {
		return nil, err
	}
	if err := cs.checkUsers(ctx, pr, data, p.DomainID, pj.ProjectID); err != nil {
		return nil, err
	}
	level := r.NotificationLevel
	if level == "" {
		level = "LV1"
	}
	doc := &Channel{ID: id, ProjectChannelID: id, Name: r.Name, State: core.Enabled, Data: data, IsSubscribe: r.IsSubscribe,
		Subscriptions: subs, NotificationLevel: level, IsScheduled: r.IsScheduled, Schedule: sch, Tags: wire.Object(r.Tags),
		ProtocolID: pr.ProtocolID, Sealed: sealed, ProjectID: pj.ProjectID, WorkspaceID: pj.WorkspaceID, DomainID: p.DomainID,
		CreatedAt: wire.T(wire.Now())}
	if sealed != nil {
		doc.SecretID = wire.NewID("secret")
	}
	if _, err := cs.ops.C.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

// checkUsers: every user a channel of the built-in protocol names must be
// an ENABLED user of the domain who can read the project (identity
// decides, with the service credential); the first who is not is 400,
// one message whether the id is unknown or only without access, so the
// check tells a caller nothing of another workspace's people.
func (cs *Channels) checkUsers(ctx context.Context, pr *core.Protocol, data map[string]any, domainID, projectID string) error {
	if pr.ProtocolType != core.Internal {
		return nil
	}
	users := channel.Users(data)
	readers, err := cs.audience.Readers(ctx, domainID, projectID, users)
	if err != nil {
		return err
	}
	for _, u := range users {
		if _, ok := readers[u]; !ok {
			return errs.Invalid("data.users", fmt.Sprintf("%q is not a user of the domain who can read project %s", u, projectID))
		}
	}
	return nil
}

func (cs *Channels) update(ctx context.Context, p *auth.Principal, r *updateRequest) (*Channel, error) {
	cur, err := store.GetToChange[Channel](ctx, cs.ops.C, Resource, p, "project_channel_id", r.ProjectChannelID)
	if err != nil {
		return nil, err
	}
	set := bson.D{}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.NotificationLevel != "" {
		set = append(set, bson.E{Key: "notification_level", Value: r.NotificationLevel})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	if r.Data != nil {
		pr, err := channel.Protocol(ctx, cs.protocols, cur.DomainID, cur.ProtocolID, false)
		if err != nil {
			return nil, err
		}
		data, sealed, err := channel.Data(pr, r.Data, false, cs.keys, cur.ID, cur.DomainID)
		if err != nil {
			return nil, err
		}
		if err := cs.checkUsers(ctx, pr, data, cur.DomainID, cur.ProjectID); err != nil {
			return nil, err
		}
		set = append(set, bson.E{Key: "data", Value: freeform.Map(data)}, bson.E{Key: "sealed", Value: sealed})
		if sealed != nil && cur.SecretID == "" {
			set = append(set, bson.E{Key: "secret_id", Value: wire.NewID("secret")})
		}
	}
	return cs.ops.Set(ctx, p, cur.ID, set)
}

func (cs *Channels) setSchedule(ctx context.Context, p *auth.Principal, r *scheduleRequest) (*Channel, error) {
	set, err := channel.ScheduleSet(r.IsScheduled, r.Schedule)
	if err != nil {
		return nil, err
	}
	return cs.ops.Set(ctx, p, r.ProjectChannelID, set)
}

func (cs *Channels) setSubscription(ctx context.Context, p *auth.Principal, r *subscriptionRequest) (*Channel, error) {
	set, err := channel.SubscriptionSet(r.IsSubscribe, r.Subscriptions)
	if err != nil {
		return nil, err
	}
	return cs.ops.Set(ctx, p, r.ProjectChannelID, set)
}

func (cs *Channels) state(state string) func(context.Context, *auth.Principal, *channelRequest) (*Channel, error) {
	return func(ctx context.Context, p *auth.Principal, r *channelRequest) (*Channel, error) {
		return cs.ops.Set(ctx, p, r.ProjectChannelID, channel.State(state))
	}
}

func (cs *Channels) delete(ctx context.Context, p *auth.Principal, r *channelRequest) (*api.Empty, error) {
	return cs.ops.Delete(ctx, p, r.ProjectChannelID)
}

func (cs *Channels) get(ctx context.Context, p *auth.Principal, r *channelRequest) (*Channel, error) {
	return cs.ops.Get(ctx, p, r.ProjectChannelID)
}

func (cs *Channels) list(ctx context.Context, p *auth.Principal, r *channelQuery) (*api.List[Channel], error) {
	q := query.With(r.Query, query.Params("project_channel_id", r.ProjectChannelID, "name", r.Name, "state", r.State,
		"notification_level", r.NotificationLevel, "protocol_id", r.ProtocolID, "project_id", r.ProjectID, "workspace_id", r.WorkspaceID)...)
	return cs.ops.List(ctx, p, q)
}

func (cs *Channels) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	return cs.ops.Stat(ctx, p, r.Query)
}
