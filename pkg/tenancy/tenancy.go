// Package tenancy is the one rule of who reaches which record. A resource
// declares once which of its fields hold the domain, workspace, project
// and owner (Fields); For turns the caller's token into a Rule that gives
// the filter of every read and the stamp of every write, and decides
// whether a loaded record may be seen or changed.
//
// The rule, after the mutation handler of upstream's core (semantics.md
// 1.4 and 4.4):
//   - the domain is always the token's;
//   - a workspace role (WORKSPACE_OWNER, WORKSPACE_MEMBER) reaches its
//     workspace and the records of the whole domain (workspace "*"); it
//     reads those but changes only its workspace's; without a workspace it
//     reaches nothing;
//   - a WORKSPACE_MEMBER reaches only its token's projects and the records
//     of the whole workspace (project "*", or none), which it reads but
//     never changes;
//   - a user-owned record (owner field) is its owner's alone;
//   - where a resource says so (SharedAll), records of domain "*" are read
//     in every domain and changed only by a service credential (a SYSTEM
//     token, never a person's SYSTEM_ADMIN grant: issue 21);
//   - where a resource names an audience (a notice's workspaces), a
//     workspace role reads only the records whose audience holds its
//     workspace or "*" (or that have none), and changes only those meant
//     for its workspace alone;
//   - a domain admin or a SYSTEM token reaches the whole domain; a plain
//     USER reaches no workspace record (unless the resource is user-owned).
//
// A record the caller does not reach answers 404, as if it did not exist;
// one it reaches but may not change answers 403.
package tenancy

import (
	"errors"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

// All is the workspace_id of a record of the whole domain, and the
// project_id of a record of the whole workspace, as upstream stores them.
// A record with no project (project_id "" or absent) is the whole
// workspace's too: Nubes stores many records in no project.
const All = "*"

// Fields names the stored fields (dotted paths) that hold a resource's
// tenancy; an empty name means the resource has no such field.
type Fields struct {
	Domain    string
	Workspace string
	Project   string
	// Owner holds the user a record belongs to (user secrets, private
	// dashboards): only that user reaches it.
	Owner string
	// PrivateAll makes the domain's records (workspace "*") the domain
	// admin's alone: workspace callers do not read them either (costs no
	// rule mapped to a workspace).
	PrivateAll bool
	// SharedAll makes the records of domain "*" (plugins a service
	// registered, as upstream stores them) readable in every domain and
	// changeable by a service credential only (auth.Principal.IsService).
	SharedAll bool
	// Audience names a list of the workspaces a record is shown to (a
	// notice's workspaces, upstream's change_query_keys workspace_id ->
	// workspaces): a workspace role reaches a record only when the list
	// holds its workspace or All, or the record has no list (stored before
	// the field); a domain-wide caller reaches every record. A service
	// never stores an empty list: "for every workspace" is [All].
	Audience string
	// Platform marks a resource of the whole platform, with no tenancy
	// field (boards): every caller reaches every record, and only Access
	// decides who may call.
	Platform bool
	// Marks says the resource's records have children and are deleted
	// mark first (store.Teardown): a record carrying MarkField is
	// reached by no read and no change, only by the delete that finishes
	// it.
	Marks bool
}

// MarkField is the field set on a record whose delete has begun
// (Fields.Marks).
const MarkField = "deleting"

// WithMarks is f for a resource deleted mark first.
func (f Fields) WithMarks() Fields {
	f.Marks = true
	return f
}

// The usual declarations.
var (
	InDomain    = Fields{Domain: "domain_id"}
	InWorkspace = Fields{Domain: "domain_id", Workspace: "workspace_id"}
	InProject   = Fields{Domain: "domain_id", Workspace: "workspace_id", Project: "project_id"}
	OfPlatform  = Fields{Platform: true}
)

// ErrUndeclared is a resource without tenancy fields: a bug of the
// service (500), never an open door.
var ErrUndeclared = errors.New("tenancy: the resource declares no tenancy fields")

// Declared reports whether the resource says where its tenancy is.
func (f Fields) Declared() bool {
	return f.Platform || f.Domain != "" || f.Owner != ""
}

// Record is the tenancy of one record.
type Record struct {
	Domain, Workspace, Project, Owner string
	// Audience is the record's audience list (Fields.Audience); nil when
	// the record has none, which means every workspace.
	Audience []string
	// Marked: the record's delete has begun (Fields.Marks).
	Marked bool
}

// Of reads the tenancy fields of a stored document.
func (f Fields) Of(doc bson.Raw) Record {
	get := func(path string) string {
		if path == "" {
			return ""
		}
		v, err := doc.LookupErr(strings.Split(path, ".")...)
		if err != nil {
			return ""
		}
		s, _ := v.StringValueOK()
		return s
	}
	rec := Record{Domain: get(f.Domain), Workspace: get(f.Workspace), Project: get(f.Project), Owner: get(f.Owner)}
	if f.Audience != "" {
		rec.Audience = audienceOf(doc, f.Audience)
	}
	if f.Marks {
		rec.Marked = IsMarked(doc)
	}
	return rec
}

// audienceOf reads a stored audience list: nil when absent or null (no
// audience: every workspace); the strings of an array otherwise. A value
// of any other type, or a non-string element, reaches no workspace caller
// ([]string{} or the strings alone): the filter matches only strings.
func audienceOf(doc bson.Raw, path string) []string {
	v, err := doc.LookupErr(strings.Split(path, ".")...)
	if err != nil || v.Type == bson.TypeNull {
		return nil
	}
	out := []string{}
	arr, ok := v.ArrayOK()
	if !ok {
		return out
	}
	vals, _ := arr.Values()
	for _, e := range vals {
		if s, ok := e.StringValueOK(); ok {
			out = append(out, s)
		}
	}
	return out
}

// IsMarked reports whether a stored document carries the mark of a
// delete that has begun.
func IsMarked(doc bson.Raw) bool {
	v, err := doc.LookupErr(MarkField)
	if err != nil {
		return false
	}
	b, ok := v.BooleanOK()
	return ok && b
}

// Rule is what one caller reaches of one resource.
type Rule struct {
	f          Fields
	domain     string
	workspaces []string // nil: every workspace of the domain
	projects   []string // nil: every project
	owner      string   // "": every owner
	// allWorkspaces: may change the domain's records (workspace "*");
	// allProjects: may change the workspace's records (project "*").
	allWorkspaces, allProjects bool
	workspace                  string // the stamp
	audience                   string // the workspace an audience must hold; "": every record
	service                    bool   // may change the platform's records (SharedAll)
}

// DomainWide reports whether p acts for the whole domain: a domain admin
// or a SYSTEM token.
func DomainWide(p *auth.Principal) bool {
	return p.IsSystem() || p.Role == auth.DomainAdmin
}

// WorkspaceRole reports whether p holds a workspace role (owner or member).
func WorkspaceRole(p *auth.Principal) bool {
	return !p.IsSystem() && (p.Role == auth.WorkspaceOwner || p.Role == auth.WorkspaceMember)
}

// For is the rule of p over a resource with fields f. A workspace role
// without a workspace, and a plain user on a workspace resource that is
// not user-owned, are refused (403): they reach nothing.
func For(p *auth.Principal, f Fields) (*Rule, error) {
	if !f.Declared() {
		return nil, ErrUndeclared
	}
	if p == nil {
		return nil, errs.Unauthenticated("empty token provided.")
	}
	r := &Rule{f: f, domain: p.DomainID, allWorkspaces: true, allProjects: true, service: p.IsService()}
	if f.Platform {
		return r, nil
	}
	if f.Owner != "" {
		r.owner = p.UserID
	}
	ws := WorkspaceRole(p)
	if ws && p.WorkspaceID == "" {
		return nil, errs.Forbidden()
	}
	if f.Workspace != "" {
		switch {
		case DomainWide(p):
		case ws:
			r.workspace = p.WorkspaceID
			r.workspaces = []string{p.WorkspaceID}
			if !f.PrivateAll {
				r.workspaces = append(r.workspaces, All)
			}
			r.allWorkspaces = false
		case f.Owner != "": // a user's own records, wherever they are
			r.allWorkspaces = false
		default:
			return nil, errs.Forbidden()
		}
	}
	if f.Audience != "" {
		switch {
		case DomainWide(p):
		case ws:
			r.audience = p.WorkspaceID
		default:
			return nil, errs.Forbidden()
		}
	}
	if f.Project != "" && ws && p.Role == auth.WorkspaceMember {
		r.projects = append(slices.Clone(p.Projects), All, "")
		r.allProjects = false
	}
	return r, nil
}

// Filter is the condition every row of a read must meet; services AND it
// into their lists, stats and analyses (store.SearchFor, stat.RunFor and
// analyze.RunFor do).
func (r *Rule) Filter() bson.D {
	var d bson.D
	if r.f.Marks {
		d = append(d, bson.E{Key: MarkField, Value: bson.D{{Key: "$ne", Value: true}}})
	}
	if r.f.Platform {
		return d
	}
	if r.f.Domain != "" && r.f.SharedAll {
		d = append(d, bson.E{Key: r.f.Domain, Value: in([]string{r.domain, All})})
	} else if r.f.Domain != "" {
		d = append(d, bson.E{Key: r.f.Domain, Value: r.domain})
	}
	if r.workspaces != nil {
		d = append(d, bson.E{Key: r.f.Workspace, Value: in(r.workspaces)})
	}
	if r.projects != nil {
		// nil: a document without the field is in no project, as "" is.
		d = append(d, bson.E{Key: r.f.Project, Value: bson.D{{Key: "$in", Value: append(list(r.projects), nil)}}})
	}
	if r.audience != "" {
		// An array matches when one element is in the list; nil matches a
		// record without the field (MongoDB and FerretDB alike).
		d = append(d, bson.E{Key: r.f.Audience, Value: bson.D{{Key: "$in", Value: bson.A{r.audience, All, nil}}}})
	}
	if r.owner != "" {
		d = append(d, bson.E{Key: r.f.Owner, Value: r.owner})
	}
	return d
}

func in(vals []string) any {
	if len(vals) == 1 {
		return vals[0]
	}
	return bson.D{{Key: "$in", Value: list(vals)}}
}

func list(vals []string) bson.A {
	a := make(bson.A, len(vals))
	for i, v := range vals {
		a[i] = v
	}
	return a
}

// Sees reports whether the caller reaches a record: the Go side of Filter,
// for a record loaded by _id.
func (r *Rule) Sees(rec Record) bool {
	if r.f.Marks && rec.Marked {
		return false
	}
	if r.f.Platform {
		return true
	}
	if r.f.Domain != "" && rec.Domain != r.domain && !(r.f.SharedAll && rec.Domain == All) {
		return false
	}
	if r.workspaces != nil && !slices.Contains(r.workspaces, rec.Workspace) {
		return false
	}
	if r.projects != nil && !slices.Contains(r.projects, rec.Project) {
		return false
	}
	if r.audience != "" && rec.Audience != nil && !slices.Contains(rec.Audience, r.audience) && !slices.Contains(rec.Audience, All) {
		return false
	}
	return r.owner == "" || rec.Owner == r.owner
}

// Writable says whether the caller may change a record: 404 for one it
// does not reach, 403 for one of the whole domain (or the whole
// workspace) that only a wider caller may change.
func (r *Rule) Writable(rec Record, key, id string) error {
	if !r.Sees(rec) {
		return errs.NotFound(key, id)
	}
	return r.sharedWrite(rec)
}

func (r *Rule) sharedWrite(rec Record) error {
	if r.f.SharedAll && rec.Domain == All && !r.service {
		return errs.Forbidden()
	}
	if r.f.Workspace != "" && rec.Workspace == All && !r.allWorkspaces {
		return errs.Forbidden()
	}
	if r.f.Project != "" && (rec.Project == All || rec.Project == "") && !r.allProjects {
		return errs.Forbidden()
	}
	// A record shown to other workspaces too is a domain-wide caller's.
	if r.audience != "" && !slices.Equal(rec.Audience, []string{r.audience}) {
		return errs.Forbidden()
	}
	return nil
}

// Admits says whether the caller may create a record placed at rec
// (403 otherwise): what it would reach and may change.
func (r *Rule) Admits(rec Record) error {
	if !r.Sees(rec) {
		return errs.Forbidden()
	}
	return r.sharedWrite(rec)
}

// Stamp is the tenancy of a record the caller creates: the token's
// domain, its workspace for a workspace role ("" for a domain-wide
// caller, who names one), and the caller as owner.
func (r *Rule) Stamp() Record {
	rec := Record{Domain: r.domain, Workspace: r.workspace}
	if r.f.Owner != "" {
		rec.Owner = r.owner
	}
	return rec
}
