// Package audience decides who a notice may reach: the users of a domain
// that exist and are ENABLED, those of them who can read a project, and
// the e-mail address a user proved. It asks identity with the service
// credential through identity's own reads (user/list, role-binding/list,
// project/list, where a SYSTEM caller names the domain), on every call:
// an access given or taken counts at once. The project rule is identity's
// token/grant rule (a domain admin reads every project, a workspace owner
// every project of the workspace, a member the PUBLIC ones and those
// listing it), written here once for notification's checks.
package audience

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
)

// Identity's operations the audience reads.
const (
	UserListPath        = "/identity/v2/user/list"
	RoleBindingListPath = "/identity/v2/role-binding/list"
	ProjectListPath     = "/identity/v2/project/list"
)

// chunk bounds the ids of one identity call (one page of ListPageSize).
const chunk = call.ListPageSize

// User is a user as a notice reaches them.
type User struct {
	UserID        string `json:"user_id"`
	State         string `json:"state"`
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
	DomainID      string `json:"domain_id"`
}

// Proved reports whether address is the user's verified e-mail: the one
// address an e-mail channel of the built-in protocol delivers to.
func (u User) Proved(address string) bool {
	return u.EmailVerified && u.Email != "" && strings.EqualFold(strings.TrimSpace(u.Email), strings.TrimSpace(address))
}

// Project is what the rule needs of identity's ProjectInfo.
type Project struct {
	ProjectID   string   `json:"project_id"`
	ProjectType string   `json:"project_type"`
	Users       []string `json:"users"`
	WorkspaceID string   `json:"workspace_id"`
	DomainID    string   `json:"domain_id"`
}

// Binding is what the rule needs of identity's RoleBindingInfo.
type Binding struct {
	UserID      string `json:"user_id"`
	RoleType    string `json:"role_type"`
	WorkspaceID string `json:"workspace_id"`
	DomainID    string `json:"domain_id"`
}

// CanRead is identity's rule: who of the domain reads project pr.
func CanRead(pr Project, bindings []Binding, userID string) bool {
	for _, b := range bindings {
		if b.UserID != userID || b.DomainID != pr.DomainID {
			continue
		}
		switch {
		case b.WorkspaceID == "" && b.RoleType == "DOMAIN_ADMIN":
			return true
		case b.WorkspaceID != pr.WorkspaceID:
		case b.RoleType == "WORKSPACE_OWNER":
			return true
		case b.RoleType == "WORKSPACE_MEMBER" && (pr.ProjectType == "PUBLIC" || slices.Contains(pr.Users, userID)):
			return true
		}
	}
	return false
}

// Directory asks identity.
type Directory struct{ Identity *call.Client }

func (d Directory) list(ctx context.Context, path string, req map[string]any, ids []string, out any) error {
	if d.Identity == nil {
		return errs.Down("The identity service", errors.New("no identity client"))
	}
	req["query"] = map[string]any{"filter": []map[string]any{{"k": "user_id", "v": ids, "o": "in"}},
		"page": map[string]any{"start": 1, "limit": chunk}}
	return d.Identity.CallAsService(ctx, path, req, out)
}

// Users are the ENABLED users of the domain among ids, by id.
func (d Directory) Users(ctx context.Context, domainID string, ids []string) (map[string]User, error) {
	out := map[string]User{}
	for part := range slices.Chunk(ids, chunk) {
		var l struct {
			Results []User `json:"results"`
		}
		if err := d.list(ctx, UserListPath, map[string]any{"domain_id": domainID, "state": "ENABLED"}, part, &l); err != nil {
			return nil, err
		}
		for _, u := range l.Results {
			if u.DomainID == domainID && u.State == "ENABLED" && slices.Contains(part, u.UserID) {
				out[u.UserID] = u
			}
		}
	}
	return out, nil
}

// Readers are those of ids who are ENABLED users of the domain and can
// read the project, by id; none when the project is gone.
func (d Directory) Readers(ctx context.Context, domainID, projectID string, ids []string) (map[string]User, error) {
	out := map[string]User{}
	if len(ids) == 0 {
		return out, nil
	}
	var pl struct {
		Results []Project `json:"results"`
	}
	if d.Identity == nil {
		return nil, errs.Down("The identity service", errors.New("no identity client"))
	}
	if err := d.Identity.CallAsService(ctx, ProjectListPath, map[string]any{"domain_id": domainID, "project_id": projectID}, &pl); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(pl.Results, func(p Project) bool { return p.ProjectID == projectID && p.DomainID == domainID })
	if i < 0 {
		return out, nil
	}
	pr := pl.Results[i]
	var bindings []Binding
	for part := range slices.Chunk(ids, chunk) {
		var l struct {
			Results []Binding `json:"results"`
		}
		if err := d.list(ctx, RoleBindingListPath, map[string]any{"domain_id": domainID}, part, &l); err != nil {
			return nil, err
		}
		bindings = append(bindings, l.Results...)
	}
	var may []string
	for _, id := range ids {
		if CanRead(pr, bindings, id) {
			may = append(may, id)
		}
	}
	if len(may) == 0 {
		return out, nil
	}
	return d.Users(ctx, domainID, may)
}
