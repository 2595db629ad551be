// Package job serves identity's jobs (/identity/v2/job/): the records of
// trusted-account syncs, which the console polls for a sync's state
// (newest first). A workspace caller sees its workspace's jobs and those
// of the domain's trusted accounts (workspace "*"), and deletes only its
// workspace's.
package job

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
)

// Job is identity's JobInfo, as trusted-account sync records it.
type Job = trustedaccount.IdentityJob

// Resource is the jobs' query declaration; upstream orders them newest
// first, and the console reads [0] as the latest sync.
var Resource = query.Resource{
	KeywordFields: []string{"job_id", "trusted_account_id"},
	DefaultSort:   []query.SortKey{{Key: "created_at", Desc: true}},
	MinimalFields: []string{"job_id", "status", "trusted_account_id", "created_at", "finished_at"},
	Fields:        query.FieldsOf[Job](),
	Maps:          freeform.FieldsOf[Job](),
	Tenancy:       tenancy.InWorkspace,
}

var writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner)

type (
	jobReq struct {
		JobID string `json:"job_id" v:"required,max=64"`
	}
	listReq struct {
		Query            *query.Query `json:"query"`
		JobID            string       `json:"job_id"`
		Status           string       `json:"status" v:"enum=PENDING|IN_PROGRESS|SUCCESS|FAILURE|CANCELED"`
		TrustedAccountID string       `json:"trusted_account_id"`
		WorkspaceID      string       `json:"workspace_id"`
	}
)

type service struct{ *core.Deps }

// Routes are the job operations.
func Routes(d *core.Deps) []api.Route {
	s := &service{Deps: d}
	const p = "/identity/v2/job/"
	return []api.Route{
		api.Op[jobReq, Job]{Path: p + "get", Access: core.Readers, Summary: "Get a sync job.", Handle: s.get},
		api.Op[listReq, api.List[Job]]{Path: p + "list", Access: core.Readers, Summary: "List sync jobs, newest first.", Handle: s.list},
		api.Op[core.StatRequest, map[string]any]{Path: p + "stat", Access: core.Readers, Summary: "Statistics over sync jobs.", Handle: s.stat},
		api.Op[jobReq, api.Empty]{Path: p + "delete", Access: writers, Summary: "Delete a sync job record.", Handle: s.delete},
	}
}

func (s *service) get(ctx context.Context, p *auth.Principal, r *jobReq) (*Job, error) {
	return store.GetFor[Job](ctx, s.Jobs, Resource, p, "job_id", r.JobID)
}

func (s *service) list(ctx context.Context, p *auth.Principal, r *listReq) (*api.List[Job], error) {
	q := query.With(r.Query, query.Params("job_id", r.JobID, "status", r.Status, "trusted_account_id", r.TrustedAccountID,
		"workspace_id", r.WorkspaceID)...)
	return store.SearchFor[Job](ctx, s.Jobs, q, Resource, p)
}

func (s *service) stat(ctx context.Context, p *auth.Principal, r *core.StatRequest) (*map[string]any, error) {
	return core.StatFor(ctx, s.Jobs, p, Resource, r.Query)
}

func (s *service) delete(ctx context.Context, p *auth.Principal, r *jobReq) (*api.Empty, error) {
	j, err := store.GetToChange[Job](ctx, s.Jobs, Resource, p, "job_id", r.JobID)
	if err != nil {
		return nil, err
	}
	res, err := s.Jobs.DeleteOne(ctx, bson.D{{Key: "_id", Value: j.ID}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("job_id", r.JobID)
	}
	return &api.Empty{}, nil
}
