// Package note holds the note operations of the monitoring service:
// comments on an alert, written by the caller (created_by from the
// token), of which only the text changes. A note's alert must exist for
// the caller; the note takes its domain, workspace and project.
//
// It must not read other collections; alerts come through AlertOf.
package note

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
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

// Note is a comment on an alert, stored and sent in the same shape.
type Note struct {
	ID          string    `bson:"_id" json:"-"`
	NoteID      string    `bson:"note_id" json:"note_id"`
	AlertID     string    `bson:"alert_id" json:"alert_id"`
	Note        string    `bson:"note" json:"note"`
	CreatedBy   string    `bson:"created_by" json:"created_by"`
	DomainID    string    `bson:"domain_id" json:"domain_id"`
	WorkspaceID string    `bson:"workspace_id" json:"workspace_id"`
	ProjectID   string    `bson:"project_id" json:"project_id"`
	CreatedAt   wire.Time `bson:"created_at" json:"created_at"`
}

var resource = query.Resource{
	KeywordFields: []string{"note_id", "note", "alert_id", "created_by"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"note_id", "alert_id", "note", "created_by", "created_at"},
	Fields:        query.FieldsOf[Note](),
	Tenancy:       tenancy.InProject,
	Maps:          freeform.FieldsOf[Note](),
}

type (
	createNote struct {
		AlertID string `json:"alert_id" v:"required,max=255"`
		Note    string `json:"note" v:"required,max=10000"`
	}
	updateNote struct {
		NoteID string `json:"note_id" v:"required"`
		Note   string `json:"note" v:"max=10000"`
	}
	noteRequest struct {
		NoteID string `json:"note_id" v:"required"`
	}
	noteQuery struct {
		Query       *query.Query `json:"query"`
		NoteID      string       `json:"note_id"`
		AlertID     string       `json:"alert_id"`
		CreatedBy   string       `json:"created_by"`
		WorkspaceID string       `json:"workspace_id"`
		ProjectID   string       `json:"project_id"`
	}
	statQuery struct {
		Query *stat.Query `json:"query" v:"required"`
	}
)

// Alert is where a note's alert belongs.
type Alert struct{ DomainID, WorkspaceID, ProjectID string }

// AlertOf returns the alert the caller may see (404 otherwise).
type AlertOf func(ctx context.Context, p *auth.Principal, alertID string) (*Alert, error)

// Notes serves the note operations.
type Notes struct {
	c       *mongo.Collection
	alertOf AlertOf
}

// New creates the collection's indexes.
func New(ctx context.Context, db *mongo.Database, alertOf AlertOf) (*Notes, error) {
	ns := &Notes{c: db.Collection(core.NotesCollection), alertOf: alertOf}
	return ns, store.EnsureIndexes(ctx, ns.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "created_at", Value: -1}}},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "alert_id", Value: 1}, {Key: "created_at", Value: -1}}},
	)
}

// Routes are the operations.
func (ns *Notes) Routes() []api.Route {
	const base = "/monitoring/v1/note/"
	return []api.Route{
		api.Op[createNote, Note]{Path: base + "create", Access: core.Writers, Summary: "Write a note on an alert; created_by is the caller.", Handle: ns.create},
		api.Op[updateNote, Note]{Path: base + "update", Access: core.Writers, Summary: "Change a note's text.", Handle: ns.update},
		api.Op[noteRequest, api.Empty]{Path: base + "delete", Access: core.Writers, Summary: "Delete a note.", Handle: ns.delete},
		api.Op[noteRequest, Note]{Path: base + "get", Access: core.Readers, Summary: "Get a note.", Handle: ns.get},
		api.Op[noteQuery, api.List[Note]]{Path: base + "list", Access: core.Readers, Summary: "List the notes the caller may see.", Handle: ns.list},
		api.Op[statQuery, map[string]any]{Path: base + "stat", Access: core.Readers, Summary: "Statistics over the notes the caller may see.", Handle: ns.stat},
	}
}

func (ns *Notes) create(ctx context.Context, p *auth.Principal, r *createNote) (*Note, error) {
	rule, err := tenancy.For(p, resource.Tenancy)
	if err != nil {
		return nil, err
	}
	a, err := ns.alertOf(ctx, p, r.AlertID)
	if err != nil {
		return nil, err
	}
	if err := rule.Admits(tenancy.Record{Domain: a.DomainID, Workspace: a.WorkspaceID, Project: a.ProjectID}); err != nil {
		return nil, err
	}
	id := wire.NewID("note")
	doc := &Note{ID: id, NoteID: id, AlertID: r.AlertID, Note: r.Note, CreatedBy: p.UserID, DomainID: a.DomainID,
		WorkspaceID: a.WorkspaceID, ProjectID: a.ProjectID, CreatedAt: wire.T(wire.Now())}
	if _, err := ns.c.InsertOne(ctx, doc); err != nil {
		return nil, store.Wrap(err)
	}
	return doc, nil
}

func (ns *Notes) load(ctx context.Context, p *auth.Principal, id string) (*Note, error) {
	return store.GetFor[Note](ctx, ns.c, resource, p, "note_id", id)
}

func (ns *Notes) writable(ctx context.Context, p *auth.Principal, id string) (*Note, error) {
	return store.GetToChange[Note](ctx, ns.c, resource, p, "note_id", id)
}

func (ns *Notes) update(ctx context.Context, p *auth.Principal, r *updateNote) (*Note, error) {
	doc, err := ns.writable(ctx, p, r.NoteID)
	if err != nil || r.Note == "" {
		return doc, err
	}
	return store.SetByID[Note](ctx, ns.c, "note_id", doc.ID, bson.D{{Key: "note", Value: r.Note}})
}

func (ns *Notes) delete(ctx context.Context, p *auth.Principal, r *noteRequest) (*api.Empty, error) {
	doc, err := ns.writable(ctx, p, r.NoteID)
	if err != nil {
		return nil, err
	}
	res, err := ns.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("note_id", doc.ID)
	}
	return &api.Empty{}, nil
}

func (ns *Notes) get(ctx context.Context, p *auth.Principal, r *noteRequest) (*Note, error) {
	return ns.load(ctx, p, r.NoteID)
}

func (ns *Notes) list(ctx context.Context, p *auth.Principal, r *noteQuery) (*api.List[Note], error) {
	q := query.With(r.Query, query.Params("note_id", r.NoteID, "alert_id", r.AlertID, "created_by", r.CreatedBy,
		"workspace_id", r.WorkspaceID, "project_id", r.ProjectID)...)
	return store.SearchFor[Note](ctx, ns.c, q, resource, p)
}

func (ns *Notes) stat(ctx context.Context, p *auth.Principal, r *statQuery) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, ns.c, p, resource, r.Query)
	return &res, err
}
