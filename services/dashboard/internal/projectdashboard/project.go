package projectdashboard

import (
	"context"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
)

// ProjectGetPath is identity's operation that answers a project the
// caller may see (404 for another domain's or an unknown one).
const ProjectGetPath = "/identity/v2/project/get"

// project is what the dashboard needs of identity's ProjectInfo.
type project struct {
	ProjectID   string `json:"project_id"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

// projects asks identity about projects, on the caller's behalf.
type projects struct{ identity *call.Client }

// get returns the project id of the caller's domain. identity's answer
// passes through (404 unknown or another domain's project, 403 a caller
// identity refuses); identity not answering is 503.
func (ps projects) get(ctx context.Context, p *auth.Principal, id string) (*project, error) {
	var pr project
	if err := ps.identity.Call(ctx, ProjectGetPath, map[string]string{"project_id": id}, &pr); err != nil {
		return nil, err
	}
	// identity confines the lookup to the caller's domain already; the
	// check here keeps that true whatever identity answers.
	if pr.ProjectID != id || pr.DomainID != p.DomainID {
		return nil, errs.NotFound("project_id", id)
	}
	return &pr, nil
}
