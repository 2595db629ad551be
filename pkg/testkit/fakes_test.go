package testkit_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// asCaller is a context carrying p's bearer, as a request being served has.
func asCaller(t *testing.T, p auth.Principal) context.Context {
	return auth.WithBearer(context.Background(), testkit.Get().Token(t, p))
}

func TestFakes(t *testing.T) {
	alice := asCaller(t, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	mia := asCaller(t, auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-2"})
	identity := testkit.FakeIdentity(t, map[string]testkit.Project{"project-1": {DomainID: "domain-a", WorkspaceID: "workspace-1"}})
	repo := testkit.FakeRepository(t, map[string]testkit.RepoPlugin{"plugin-x": {ResourceType: "monitoring.Webhook"}})
	ic := call.NewClient("identity", identity.URL, "", nil)
	rc := call.NewClient("repository", repo.URL, "", nil)
	type M = map[string]any
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		c      *call.Client
		path   string
		req    M
		want   M
		status int
		code   string
	}{
		{"a project of the caller's domain", alice, ic, testkit.ProjectGetPath, M{"project_id": "project-1"},
			M{"project_id": "project-1", "name": "P", "workspace_id": "workspace-1", "domain_id": "domain-a"}, 0, ""},
		{"another workspace's project", mia, ic, testkit.ProjectGetPath, M{"project_id": "project-1"}, nil, 404, errs.NotFoundCode},
		{"an unknown project", alice, ic, testkit.ProjectGetPath, M{"project_id": "project-2"}, nil, 404, errs.NotFoundCode},
		// Without a caller the service credential is sent (empty here): its refusal is the deployment's fault, a 503.
		{"no bearer, no service credential", context.Background(), ic, testkit.ProjectGetPath, M{"project_id": "project-1"}, nil, 503, errs.Unavailable},
		{"a path not handled", alice, ic, "/identity/v2/workspace/get", M{}, nil, 404, errs.UnsupportedAPI},
		{"a known plugin", alice, rc, testkit.PluginGetPath, M{"plugin_id": "plugin-x"},
			M{"plugin_id": "plugin-x", "name": "plugin-x", "resource_type": "monitoring.Webhook", "provider": "", "capability": M{}, "state": "ENABLED"}, 0, ""},
		{"its versions", alice, rc, testkit.PluginVersionsPath, M{"plugin_id": "plugin-x"},
			M{"results": []any{"1.2.0", "1.1.0"}, "total_count": float64(2)}, 0, ""},
		{"an unknown plugin", alice, rc, testkit.PluginGetPath, M{"plugin_id": "plugin-y"}, nil, 404, errs.NotFoundCode},
		{"an unknown plugin's versions", alice, rc, testkit.PluginVersionsPath, M{"plugin_id": "plugin-y"}, nil, 404, errs.NotFoundCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got M
			err := tc.c.Call(tc.ctx, tc.path, tc.req, &got)
			if tc.code != "" {
				if e, ok := errs.As(err); !ok || e.Status() != tc.status || e.Code != tc.code || e.Message == "" {
					t.Fatalf("got %v, want %d %s", err, tc.status, tc.code)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if identity.Calls() != 5 {
		t.Fatalf("identity counted %d calls, want 5", identity.Calls())
	}
	identity.Handle(testkit.ProjectGetPath, func(*auth.Principal, map[string]any) (any, error) { return nil, errs.Forbidden() })
	if err := ic.Call(alice, testkit.ProjectGetPath, M{}, nil); err == nil {
		t.Fatal("a replaced handler still answers")
	} else if e, _ := errs.As(err); e.Status() != http.StatusForbidden {
		t.Fatalf("got %v", err)
	}
	identity.Close()
	if e, _ := errs.As(ic.Call(alice, testkit.ProjectGetPath, M{}, nil)); e == nil || e.Status() != http.StatusServiceUnavailable {
		t.Fatalf("a closed fake answers %v", e)
	}
}

func TestStoreHelpers(t *testing.T) {
	coll := testkit.Get().Database(t).Collection("things")
	if n := testkit.Count(t, coll); n != 0 {
		t.Fatalf("empty: %d", n)
	}
	if _, err := coll.InsertMany(context.Background(), []any{bson.D{{Key: "_id", Value: "a"}, {Key: "k", Value: 1}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "k", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	if n := testkit.Count(t, coll); n != 2 {
		t.Fatalf("all: %d", n)
	}
	if n := testkit.Count(t, coll, bson.E{Key: "k", Value: 2}); n != 1 {
		t.Fatalf("filtered: %d", n)
	}
	if m := testkit.Raw(t, coll, "a"); m["k"] != int32(1) {
		t.Fatalf("raw: %v", m)
	}
	if _, ok := testkit.Find(t, coll, "zz"); ok {
		t.Fatal("found a missing document")
	}
	if d := testkit.Docs(t, coll); len(d) != 2 {
		t.Fatalf("docs: %v", d)
	}
}
