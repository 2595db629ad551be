package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
)

// Req is one call of the API: a path and its body.
type Req struct {
	Path string
	Body any
}

// Tenancy is the tenancy matrix of one stored record: every caller
// outside the record's tenancy reads nothing of it (get 404 or 403, list
// and stat empty or 403) and changes nothing (each of Changes answers 404
// or 403, the record stays byte for byte as stored and the Watch
// collections keep their counts).
//
// The outsiders come from where the record lives: an admin of another
// domain and a plain USER of its domain always; a WORKSPACE_OWNER without
// a workspace always; a WORKSPACE_OWNER of another workspace when
// Workspace names one (not "" or "*"); a WORKSPACE_MEMBER of the
// workspace outside the project when Project names one.
type Tenancy struct {
	Handler http.Handler
	// Coll and ID are where the record is stored (_id).
	Coll *mongo.Collection
	ID   string
	// Domain, Workspace and Project are the record's tenancy.
	Domain, Workspace, Project string
	// Get reads the record; List and Stat should reach it for its owner
	// (filter by its id): for outsiders they must come back empty.
	Get, List Req
	Stat      *Req
	// Changes are update, delete and every verb on the record.
	Changes []Req
	// Insider reaches the record: Get, List and Stat must find it for
	// them, so the matrix cannot pass on calls that reach nothing.
	Insider auth.Principal
	// Watch are collections a change could add to or remove from (jobs a
	// collect would start); their counts must not move.
	Watch []*mongo.Collection
	// NamesDomain: the requests carry domain_id (map bodies); each caller
	// names its own domain in them, as its client would, so that the
	// tenancy rule is tried rather than the check of a named domain.
	NamesDomain bool
	// UserReads: every user of the domain reads the record (upstream's
	// read roles include USER: plugins, policies, schemas, protocols); the
	// plain user is then tried on Changes only.
	UserReads bool
	// Enroll, when set, makes a caller real before it calls (the insider
	// and each outsider): for a service whose authenticator checks its
	// own records behind a token (identity: the user, its domain, its
	// binding), so an outsider is refused by tenancy, not by a 401.
	Enroll func(t *testing.T, p auth.Principal)
	// NoToken: every call without a credential answers 401 and changes
	// nothing.
	NoToken bool
	// SecretPaths are stored paths that hold a secret: a List filtering or
	// sorting on one, or a Stat's distinct of one, answers 400 to the
	// insider (decided before any value is read).
	SecretPaths []string
}

// Outsider is a caller outside a record's tenancy.
type Outsider struct {
	Name string
	auth.Principal
}

// Outsiders are the callers Run tries for a record at domain, workspace
// and project.
func Outsiders(domain, workspace, project string) []Outsider {
	out := []Outsider{
		{"admin of another domain", auth.Principal{DomainID: domain + "-other", UserID: "outsider-admin", Role: auth.DomainAdmin}},
		{"plain user", auth.Principal{DomainID: domain, UserID: "outsider-user", Role: auth.User}},
		{"workspace owner without a workspace", auth.Principal{DomainID: domain, UserID: "outsider-nows", Role: auth.WorkspaceOwner}},
	}
	if workspace != "" && workspace != "*" {
		out = append(out, Outsider{"owner of another workspace", auth.Principal{DomainID: domain, UserID: "outsider-owner",
			Role: auth.WorkspaceOwner, WorkspaceID: workspace + "-other"}})
		if project != "" && project != "*" {
			out = append(out, Outsider{"member outside the project", auth.Principal{DomainID: domain, UserID: "outsider-member",
				Role: auth.WorkspaceMember, WorkspaceID: workspace, Projects: []string{project + "-other"}}})
		}
	}
	return out
}

// Run tries every outsider.
func (m Tenancy) Run(t *testing.T) {
	t.Helper()
	if m.Coll == nil || m.ID == "" || m.Domain == "" || m.Get.Path == "" || m.List.Path == "" {
		t.Fatal("tenancy matrix: Coll, ID, Domain, Get and List are required")
	}
	outsiders := Outsiders(m.Domain, m.Workspace, m.Project)
	if m.Enroll != nil { // before the snapshots: enrolling may add records
		m.Enroll(t, m.Insider)
		for _, o := range outsiders {
			m.Enroll(t, o.Principal)
		}
	}
	in := NewClient(t, m.Handler).For(m.Insider)
	in.Call(m.Get.Path, m.body(t, m.Insider, m.Get)).OK(nil)
	for _, q := range append([]Req{m.List}, deref(m.Stat)...) {
		if r := in.Call(q.Path, m.body(t, m.Insider, q)); r.Status != http.StatusOK || emptyResults(r) {
			t.Fatalf("%s: the insider finds nothing (%d): %s", r.Path, r.Status, r.Body)
		}
	}
	before := rawDoc(t, m.Coll, m.ID)
	m.secretPaths(t, in)
	if m.NoToken {
		anon := NewClient(t, m.Handler)
		for _, q := range slices.Concat([]Req{m.Get, m.List}, deref(m.Stat), m.Changes) {
			if r := anon.Call(q.Path, q.Body); r.Status != http.StatusUnauthorized {
				t.Errorf("%s without a token: %d, want 401: %s", r.Path, r.Status, r.Body)
			}
		}
		if after := rawDoc(t, m.Coll, m.ID); !bytes.Equal(before, after) {
			t.Fatalf("a call without a token changed the record")
		}
	}
	counts := make([]int64, len(m.Watch))
	for i, c := range m.Watch {
		counts[i] = Count(t, c)
	}
	for _, o := range outsiders {
		t.Run(o.Name, func(t *testing.T) {
			c := NewClient(t, m.Handler).For(o.Principal)
			reads := !(m.UserReads && o.Role == auth.User)
			if r := c.Call(m.Get.Path, m.body(t, o.Principal, m.Get)); reads && r.Status != http.StatusNotFound && r.Status != http.StatusForbidden {
				t.Errorf("%s: %d, want 404 or 403: %s", r.Path, r.Status, r.Body)
			}
			for _, q := range append([]Req{m.List}, deref(m.Stat)...) {
				if r := c.Call(q.Path, m.body(t, o.Principal, q)); reads && r.Status != http.StatusForbidden && !emptyResults(r) {
					t.Errorf("%s: %d, want no results or 403: %s", r.Path, r.Status, r.Body)
				}
			}
			for _, q := range m.Changes {
				if r := c.Call(q.Path, m.body(t, o.Principal, q)); r.Status != http.StatusNotFound && r.Status != http.StatusForbidden {
					t.Errorf("%s: %d, want 404 or 403: %s", r.Path, r.Status, r.Body)
				}
				if after := rawDoc(t, m.Coll, m.ID); !bytes.Equal(before, after) {
					t.Fatalf("%s changed the record:\nbefore %v\nafter  %v", q.Path, bson.Raw(before), bson.Raw(after))
				}
			}
			for i, coll := range m.Watch {
				if n := Count(t, coll); n != counts[i] {
					t.Fatalf("%s: %d documents, %d before", coll.Name(), n, counts[i])
				}
			}
		})
	}
}

// secretPaths checks that the insider's List refuses a filter and a sort
// on each secret path, and its Stat a distinct of one.
func (m Tenancy) secretPaths(t *testing.T, in *Client) {
	t.Helper()
	with := func(q Req, query map[string]any) any {
		b, _ := m.body(t, m.Insider, q).(map[string]any)
		out := map[string]any{"query": query}
		for k, v := range b {
			if k != "query" {
				out[k] = v
			}
		}
		return out
	}
	for _, p := range m.SecretPaths {
		for _, query := range []map[string]any{
			{"filter": []any{map[string]any{"k": p, "v": nil, "o": "exists"}}},
			{"filter": []any{map[string]any{"k": p + ".key", "v": "guess", "o": "eq"}}},
			{"sort": []any{map[string]any{"key": p}}},
		} {
			if r := in.Call(m.List.Path, with(m.List, query)); r.Status != http.StatusBadRequest {
				t.Errorf("%s %v: %d, want 400: %s", r.Path, query, r.Status, r.Body)
			}
		}
		if m.Stat != nil {
			if r := in.Call(m.Stat.Path, with(*m.Stat, map[string]any{"distinct": p})); r.Status != http.StatusBadRequest {
				t.Errorf("%s distinct %s: %d, want 400: %s", r.Path, p, r.Status, r.Body)
			}
		}
	}
}

// body is q's body as p sends it: naming p's domain when NamesDomain.
func (m Tenancy) body(t *testing.T, p auth.Principal, q Req) any {
	t.Helper()
	if !m.NamesDomain {
		return q.Body
	}
	b, ok := q.Body.(map[string]any)
	if !ok {
		t.Fatalf("tenancy matrix: NamesDomain needs map bodies, %s has %T", q.Path, q.Body)
	}
	out := make(map[string]any, len(b)+1)
	for k, v := range b {
		out[k] = v
	}
	out["domain_id"] = p.DomainID
	return out
}

func deref(r *Req) []Req {
	if r == nil {
		return nil
	}
	return []Req{*r}
}

// emptyResults reports a 200 whose results are empty (and total_count,
// when present, 0).
func emptyResults(r *Response) bool {
	if r.Status != http.StatusOK {
		return false
	}
	var body struct {
		Results    []any  `json:"results"`
		TotalCount *int64 `json:"total_count"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return false
	}
	return len(body.Results) == 0 && (body.TotalCount == nil || *body.TotalCount == 0)
}

// rawDoc is the stored bytes of a document; a missing one fails the test.
func rawDoc(t *testing.T, coll *mongo.Collection, id string) []byte {
	t.Helper()
	raw, err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		t.Fatalf("%s %s: %v", coll.Name(), id, err)
	}
	return bytes.Clone(raw)
}
