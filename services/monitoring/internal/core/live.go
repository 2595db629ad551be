package core

import (
	"context"

	"github.com/nubes-io/nubes/pkg/errs"
)

// WorkspaceGetPath is identity's operation answering a workspace.
const WorkspaceGetPath = "/identity/v2/workspace/get"

// Live checks, with the service's credential, that identity still holds
// the project (or, for a workspace-wide record, the workspace) a webhook
// belongs to: the ingest URL of a deleted project or workspace answers
// 404 at once, before the deletion's cascade reached this service
// (docs/decisions.md, issue 38). A domain-wide record is always live.
// identity down is 503: the sender retries.
func (ps Projects) Live(ctx context.Context, domainID, workspaceID, projectID string) error {
	var got struct {
		DomainID    string `json:"domain_id"`
		WorkspaceID string `json:"workspace_id"`
		ProjectID   string `json:"project_id"`
	}
	switch {
	case projectID != "" && projectID != Global:
		err := ps.Identity.CallAsService(ctx, ProjectGetPath, map[string]string{"project_id": projectID, "domain_id": domainID}, &got)
		if errs.Is(err, errs.NotFoundCode) || (err == nil && (got.ProjectID != projectID || got.DomainID != domainID)) {
			return errs.NotFound("project_id", projectID)
		}
		return err
	case workspaceID != "" && workspaceID != Global:
		err := ps.Identity.CallAsService(ctx, WorkspaceGetPath, map[string]string{"workspace_id": workspaceID, "domain_id": domainID}, &got)
		if errs.Is(err, errs.NotFoundCode) || (err == nil && (got.WorkspaceID != workspaceID || got.DomainID != domainID)) {
			return errs.NotFound("workspace_id", workspaceID)
		}
		return err
	}
	return nil
}
