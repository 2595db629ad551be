package store_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/testkit"
)

type placed struct {
	ID        string `bson:"_id"`
	Domain    string `bson:"domain_id"`
	Workspace string `bson:"workspace_id"`
}

// TestTenancyHelpers: GetFor, GetToChange and SearchFor apply the rule on
// the real store, a document without a project field included (the
// member's filter matches it through a null in $in).
func TestTenancyHelpers(t *testing.T) {
	t.Parallel()
	c := testkit.Get().Database(t).Collection("placed")
	docs := []bson.D{
		{{Key: "_id", Value: "w1p1"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}, {Key: "project_id", Value: "p1"}},
		{{Key: "_id", Value: "w1p2"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}, {Key: "project_id", Value: "p2"}},
		{{Key: "_id", Value: "w1none"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}}, // no project field
		{{Key: "_id", Value: "w1all"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w1"}, {Key: "project_id", Value: "*"}},
		{{Key: "_id", Value: "dom"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "*"}, {Key: "project_id", Value: "*"}},
		{{Key: "_id", Value: "w2p3"}, {Key: "domain_id", Value: "d1"}, {Key: "workspace_id", Value: "w2"}, {Key: "project_id", Value: "p3"}},
		{{Key: "_id", Value: "other"}, {Key: "domain_id", Value: "d2"}, {Key: "workspace_id", Value: "w1"}, {Key: "project_id", Value: "p1"}},
	}
	for _, d := range docs {
		if _, err := c.InsertOne(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	r := query.Resource{Tenancy: tenancy.InProject}
	member := &auth.Principal{DomainID: "d1", UserID: "m", Role: auth.WorkspaceMember, WorkspaceID: "w1", Projects: []string{"p1"}}
	owner := &auth.Principal{DomainID: "d1", UserID: "o", Role: auth.WorkspaceOwner, WorkspaceID: "w1"}
	admin := &auth.Principal{DomainID: "d1", UserID: "a", Role: auth.DomainAdmin}
	for _, tc := range []struct {
		p    *auth.Principal
		sees []string
	}{
		{member, []string{"dom", "w1all", "w1none", "w1p1"}},
		{owner, []string{"dom", "w1all", "w1none", "w1p1", "w1p2"}},
		{admin, []string{"dom", "w1all", "w1none", "w1p1", "w1p2", "w2p3"}},
	} {
		l, err := store.SearchFor[placed](context.Background(), c, nil, r, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range l.Results {
			got = append(got, d.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.sees) || l.TotalCount != int64(len(tc.sees)) {
			t.Fatalf("%s lists %v, want %v", tc.p.Role, got, tc.sees)
		}
		for _, d := range docs {
			id := d[0].Value.(string)
			_, err := store.GetFor[placed](context.Background(), c, r, tc.p, "id", id)
			if slices.Contains(tc.sees, id) != (err == nil) {
				t.Fatalf("%s gets %s: %v", tc.p.Role, id, err)
			}
			if err != nil {
				wantCode(t, err, http.StatusNotFound, errs.NotFoundCode)
			}
		}
	}
	for _, tc := range []struct {
		p      *auth.Principal
		id     string
		status int
	}{
		{member, "w1p1", 200}, {member, "w1none", 403}, {member, "w1all", 403}, {member, "dom", 403}, {member, "w1p2", 404},
		{owner, "w1p2", 200}, {owner, "w1all", 200}, {owner, "dom", 403}, {owner, "w2p3", 404}, {owner, "other", 404},
		{admin, "dom", 200},
	} {
		_, err := store.GetToChange[placed](context.Background(), c, r, tc.p, "id", tc.id)
		if tc.status == 200 {
			if err != nil {
				t.Fatalf("%s changes %s: %v", tc.p.Role, tc.id, err)
			}
			continue
		}
		code := errs.NotFoundCode
		if tc.status == 403 {
			code = errs.PermissionDenied
		}
		wantCode(t, err, tc.status, code)
	}
	// A workspace role without a workspace reaches nothing; an undeclared
	// resource is a bug, not an open door.
	_, err := store.SearchFor[placed](context.Background(), c, nil, r, &auth.Principal{DomainID: "d1", Role: auth.WorkspaceOwner})
	wantCode(t, err, http.StatusForbidden, errs.PermissionDenied)
	if _, err := store.GetFor[placed](context.Background(), c, query.Resource{}, admin, "id", "dom"); err == nil {
		t.Fatal("a resource without tenancy fields was read")
	}
}
