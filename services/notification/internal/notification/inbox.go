// Package notification holds the notification resource
// (/notification/v1/notification): a user's in-app notifications (get,
// list, stat, delete, set-read, as upstream's: what notification requests
// left for the user, each user's own; inbox.go), and the operations
// services send with (create, push; send.go).
package notification

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/notification/internal/channel"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// Notification is the NotificationInfo sent.
type Notification = core.Inbox

// Resource: a user's own.
var Resource = query.Resource{
	KeywordFields: []string{"notification_id", "topic"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"notification_id", "topic", "notification_type", "is_read", "created_at"},
	Fields:        query.FieldsOf[Notification](),
	Maps:          freeform.FieldsOf[Notification](),
	Tenancy:       tenancy.Fields{Domain: "domain_id", Owner: "user_id"},
}

var users = auth.Roles(auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)

type (
	request struct {
		NotificationID string `json:"notification_id" v:"required"`
		DomainID       string `json:"domain_id"`
	}
	setRead struct {
		Notifications []string `json:"notifications" v:"required,max=1000"`
		DomainID      string   `json:"domain_id"`
	}
	listQuery struct {
		Query             *query.Query `json:"query"`
		NotificationID    string       `json:"notification_id"`
		Topic             string       `json:"topic"`
		NotificationType  string       `json:"notification_type" v:"enum=INFO|ERROR|SUCCESS|WARNING"`
		NotificationLevel string       `json:"notification_level"`
		IsRead            *bool        `json:"is_read"`
		UserID            string       `json:"user_id"`
		DomainID          string       `json:"domain_id"`
	}
	statQuery struct {
		Query    *stat.Query `json:"query" v:"required"`
		DomainID string      `json:"domain_id"`
	}
)

// Inbox serves the operations.
type Inbox struct{ ops channel.Ops[Notification] }

// New serves the inbox kept in db.
func New(db *mongo.Database) *Inbox {
	return &Inbox{ops: channel.Ops[Notification]{C: db.Collection(core.InboxCollection), Resource: Resource, Key: "notification_id"}}
}

// Routes are the operations.
func (in *Inbox) Routes() []api.Route {
	const base = "/notification/v1/notification/"
	return []api.Route{
		api.Op[request, Notification]{Path: base + "get", Access: users, Summary: "Get one of your notifications.", Handle: in.get},
		api.Op[listQuery, api.List[Notification]]{Path: base + "list", Access: users, Summary: "List your notifications, newest first.", Handle: in.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: users, Summary: "Statistics over your notifications.", Handle: in.stat},
		api.Op[request, api.Empty]{Path: base + "delete", Access: users, Summary: "Delete one of your notifications.", Handle: in.delete},
		api.Op[setRead, api.Empty]{Path: base + "set-read", Access: users, Summary: "Mark your notifications read.", Handle: in.setRead},
	}
}

// checkDomain: a domain_id must be the caller's (404 otherwise).
func checkDomain(p *auth.Principal, domainID string) error {
	if domainID != "" && domainID != p.DomainID {
		return errs.NotFound("domain_id", domainID)
	}
	return nil
}

func (in *Inbox) get(ctx context.Context, p *auth.Principal, r *request) (*Notification, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return in.ops.Get(ctx, p, r.NotificationID)
}

func (in *Inbox) list(ctx context.Context, p *auth.Principal, r *listQuery) (*api.List[Notification], error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return in.ops.List(ctx, p, query.With(r.Query, query.Params("notification_id", r.NotificationID, "topic", r.Topic,
		"notification_type", r.NotificationType, "notification_level", r.NotificationLevel, "is_read", r.IsRead, "user_id", r.UserID)...))
}

func (in *Inbox) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return in.ops.Stat(ctx, p, r.Query)
}

func (in *Inbox) delete(ctx context.Context, p *auth.Principal, r *request) (*api.Empty, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	return in.ops.Delete(ctx, p, r.NotificationID)
}

// setRead marks each named notification read; one the caller does not
// own is 404 and nothing is marked.
func (in *Inbox) setRead(ctx context.Context, p *auth.Principal, r *setRead) (*api.Empty, error) {
	if err := checkDomain(p, r.DomainID); err != nil {
		return nil, err
	}
	for _, id := range r.Notifications {
		if _, err := store.GetToChange[Notification](ctx, in.ops.C, Resource, p, "notification_id", id); err != nil {
			return nil, err
		}
	}
	for _, id := range r.Notifications {
		if _, err := in.ops.Set(ctx, p, id, bson.D{{Key: "is_read", Value: true}}); err != nil {
			return nil, err
		}
	}
	return &api.Empty{}, nil
}
