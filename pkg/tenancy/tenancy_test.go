package tenancy

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

var (
	system   = &auth.Principal{TokenType: auth.SystemToken, DomainID: "d1", UserID: "root", Role: auth.SystemAdmin}
	admin    = &auth.Principal{DomainID: "d1", UserID: "alice", Role: auth.DomainAdmin}
	adminB   = &auth.Principal{DomainID: "d2", UserID: "bob", Role: auth.DomainAdmin}
	owner1   = &auth.Principal{DomainID: "d1", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "w1"}
	owner2   = &auth.Principal{DomainID: "d1", UserID: "otto", Role: auth.WorkspaceOwner, WorkspaceID: "w2"}
	member1  = &auth.Principal{DomainID: "d1", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "w1", Projects: []string{"p1"}}
	memberNo = &auth.Principal{DomainID: "d1", UserID: "max", Role: auth.WorkspaceMember, WorkspaceID: "w1"}
	noWS     = &auth.Principal{DomainID: "d1", UserID: "nina", Role: auth.WorkspaceOwner}
	user     = &auth.Principal{DomainID: "d1", UserID: "ulla", Role: auth.User}
	sysAdmin = &auth.Principal{TokenType: auth.AccessToken, DomainID: "d1", UserID: "sa", Role: auth.SystemAdmin}
)

// matches evaluates a filter of Rule.Filter's shapes (equality and $in)
// on a record, so Filter and Sees are checked to agree.
func matches(t *testing.T, f bson.D, f2 Fields, rec Record) bool {
	t.Helper()
	val := map[string]string{f2.Domain: rec.Domain, f2.Workspace: rec.Workspace, f2.Project: rec.Project, f2.Owner: rec.Owner}
	for _, e := range f {
		if e.Key == f2.Audience { // an array matches when one element does
			vals := e.Value.(bson.D)[0].Value.(bson.A)
			hit := rec.Audience == nil && slices.Contains(vals, nil)
			for _, a := range rec.Audience {
				hit = hit || slices.Contains(vals, any(a))
			}
			if !hit {
				return false
			}
			continue
		}
		v := val[e.Key]
		switch c := e.Value.(type) {
		case string:
			if v != c {
				return false
			}
		case bson.D:
			vals := c[0].Value.(bson.A)
			if c[0].Key != "$in" || !slices.Contains(vals, any(v)) && !(v == "" && slices.Contains(vals, nil)) {
				return false
			}
		default:
			t.Fatalf("unexpected condition %v", e)
		}
	}
	return true
}

func status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	e, ok := errs.As(err)
	if !ok {
		return http.StatusInternalServerError
	}
	return e.Status()
}

func TestRule(t *testing.T) {
	ws := func(w string) Record { return Record{Domain: "d1", Workspace: w} }
	pr := func(w, p string) Record { return Record{Domain: "d1", Workspace: w, Project: p} }
	notice := Fields{Domain: "domain_id", Audience: "workspaces"}
	aud := func(ws ...string) Record { return Record{Domain: "d1", Audience: append([]string{}, ws...)} }
	for _, c := range []struct {
		name   string
		p      *auth.Principal
		f      Fields
		rec    Record
		see    bool
		change int // status of Writable
		create int // status of Admits
	}{
		{"admin sees its domain", admin, InWorkspace, ws("w1"), true, 200, 200},
		{"admin changes the domain's records", admin, InWorkspace, ws(All), true, 200, 200},
		{"system is confined to its domain", system, InWorkspace, Record{Domain: "d2", Workspace: "w1"}, false, 404, 403},
		{"another domain's admin", adminB, InWorkspace, ws("w1"), false, 404, 403},
		{"owner sees its workspace", owner1, InWorkspace, ws("w1"), true, 200, 200},
		{"owner reads the domain's records", owner1, InWorkspace, ws(All), true, 403, 403},
		{"owner of another workspace", owner2, InWorkspace, ws("w1"), false, 404, 403},
		{"owner, workspace without a workspace field", owner2, InDomain, ws("w1"), true, 200, 200},
		{"owner, private domain records", owner1, Fields{Domain: "domain_id", Workspace: "workspace_id", PrivateAll: true}, ws(All), false, 404, 403},
		{"member in its project", member1, InProject, pr("w1", "p1"), true, 200, 200},
		{"member reads the workspace's records", member1, InProject, pr("w1", All), true, 403, 403},
		{"member outside the project", member1, InProject, pr("w1", "p2"), false, 404, 403},
		{"member without projects", memberNo, InProject, pr("w1", "p1"), false, 404, 403},
		{"member reads a record in no project", member1, InProject, pr("w1", ""), true, 403, 403},
		{"member, resource without projects", memberNo, InWorkspace, pr("w1", "p9"), true, 200, 200},
		{"member of the workspace's records, another workspace", member1, InProject, pr("w2", All), false, 404, 403},
		{"owner ignores projects", owner1, InProject, pr("w1", "p2"), true, 200, 200},
		{"owner's own record", owner1, Fields{Domain: "domain_id", Owner: "user_id"}, Record{Domain: "d1", Owner: "olga"}, true, 200, 200},
		{"another user's record, even for the admin", admin, Fields{Domain: "domain_id", Owner: "user_id"}, Record{Domain: "d1", Owner: "olga"}, false, 404, 403},
		{"user, owned workspace record", user, Fields{Domain: "domain_id", Workspace: "workspace_id", Owner: "user_id"}, Record{Domain: "d1", Workspace: "w1", Owner: "ulla"}, true, 200, 200},
		{"user, domain resource", user, InDomain, ws(""), true, 200, 200},
		{"platform resource", adminB, OfPlatform, Record{}, true, 200, 200},
		{"shared record read in every domain", adminB, Fields{Domain: "domain_id", SharedAll: true}, Record{Domain: All}, true, 403, 403},
		{"shared record changed by a service", system, Fields{Domain: "domain_id", SharedAll: true}, Record{Domain: All}, true, 200, 200},
		{"shared record not changed by a person's SYSTEM_ADMIN grant", sysAdmin, Fields{Domain: "domain_id", SharedAll: true}, Record{Domain: All}, true, 403, 403},
		{"another domain's record stays hidden when sharing", adminB, Fields{Domain: "domain_id", SharedAll: true}, Record{Domain: "d1"}, false, 404, 403},
		{"admin reads a notice for one workspace", admin, notice, aud("w1"), true, 200, 200},
		{"owner reads a notice for its workspace", owner1, notice, aud("w1"), true, 200, 200},
		{"owner of another workspace, notice for one", owner2, notice, aud("w1"), false, 404, 403},
		{"owner of another workspace, notice for two", owner2, notice, aud("w1", "w3"), false, 404, 403},
		{"owner reads a notice for two, changes nothing", owner1, notice, aud("w3", "w1"), true, 403, 403},
		{"member reads a notice for all", member1, notice, aud(All), true, 403, 403},
		{"member reads a notice without a list", member1, notice, Record{Domain: "d1"}, true, 403, 403},
		{"owner, a stored empty list", owner1, notice, aud(), false, 404, 403},
		{"admin, a stored empty list", admin, notice, aud(), true, 200, 200},
		{"another domain's admin, notice for all", adminB, notice, aud(All), false, 404, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := For(c.p, c.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Sees(c.rec); got != c.see {
				t.Fatalf("Sees = %v, want %v", got, c.see)
			}
			if got := matches(t, r.Filter(), c.f, c.rec); got != c.see {
				t.Fatalf("Filter %v matches = %v, want %v", r.Filter(), got, c.see)
			}
			if got := status(r.Writable(c.rec, "id", "x")); got != c.change {
				t.Fatalf("Writable = %d, want %d", got, c.change)
			}
			if got := status(r.Admits(c.rec)); got != c.create {
				t.Fatalf("Admits = %d, want %d", got, c.create)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		p    *auth.Principal
		f    Fields
		want int
	}{
		{"workspace role without a workspace", noWS, InDomain, 403},
		{"workspace role without a workspace, workspace resource", noWS, InWorkspace, 403},
		{"plain user on a workspace resource", user, InWorkspace, 403},
		{"plain user on a resource with an audience", user, Fields{Domain: "domain_id", Audience: "workspaces"}, 403},
		{"workspace role without a workspace, audience", noWS, Fields{Domain: "domain_id", Audience: "workspaces"}, 403},
		{"no caller", nil, InDomain, 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := For(c.p, c.f); status(err) != c.want {
				t.Fatalf("For: %v, want %d", err, c.want)
			}
		})
	}
	if _, err := For(admin, Fields{}); !errors.Is(err, ErrUndeclared) {
		t.Fatalf("undeclared fields: %v", err)
	}
}

func TestStamp(t *testing.T) {
	f := Fields{Domain: "domain_id", Workspace: "workspace_id", Owner: "user_id"}
	for _, c := range []struct {
		p    *auth.Principal
		want Record
	}{
		{admin, Record{Domain: "d1", Owner: "alice"}},
		{owner1, Record{Domain: "d1", Workspace: "w1", Owner: "olga"}},
		{member1, Record{Domain: "d1", Workspace: "w1", Owner: "mia"}},
	} {
		r, err := For(c.p, f)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Stamp(); !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%s: Stamp = %+v, want %+v", c.p.UserID, got, c.want)
		}
	}
}

func TestOf(t *testing.T) {
	f := Fields{Domain: "domain_id", Workspace: "where.workspace", Project: "project_id", Owner: "user_id"}
	raw, _ := bson.Marshal(bson.D{{Key: "domain_id", Value: "d1"}, {Key: "where", Value: bson.D{{Key: "workspace", Value: "w1"}}}, {Key: "project_id", Value: 7}})
	if got, want := f.Of(raw), (Record{Domain: "d1", Workspace: "w1"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Of = %+v, want %+v (a non-string project reads as none)", got, want)
	}
	notice := Fields{Domain: "domain_id", Audience: "workspaces"}
	for _, c := range []struct {
		name string
		v    any // nil: no field
		want []string
	}{
		{"absent", nil, nil},
		{"null", bson.Null{}, nil},
		{"a list", bson.A{"w1", All}, []string{"w1", All}},
		{"non-strings left out", bson.A{"w1", 3}, []string{"w1"}},
		{"empty", bson.A{}, []string{}},
		{"not a list reaches no one", "w1", []string{}},
	} {
		d := bson.D{{Key: "domain_id", Value: "d1"}}
		if c.v != nil {
			d = append(d, bson.E{Key: "workspaces", Value: c.v})
		}
		raw, _ := bson.Marshal(d)
		if got := notice.Of(raw).Audience; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Audience = %#v, want %#v", c.name, got, c.want)
		}
	}
}
