package job_test

import (
	"net/http"
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/job"
	"github.com/nubes-io/nubes/services/identity/internal/rolebinding"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const jp = "/identity/job/"

type list struct {
	Results    []map[string]any `json:"results"`
	TotalCount int              `json:"total_count"`
}

// TestJobs: the console's job/list by trusted_account_id answers the
// newest sync first; get, stat and delete; outsiders see none.
func TestJobs(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(job.Routes, trustedaccount.Routes, workspace.Routes, rolebinding.Routes))
	ws, owner, member := h.WorkspaceUsers("ws")
	_, otherOwner, _ := h.WorkspaceUsers("other")
	var ta map[string]any
	owner.Call("/identity/trusted-account/create", map[string]any{"name": "t", "data": map[string]any{"account_id": "1"}, "provider": "aws",
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAJOBS", "aws_secret_access_key": "jobs-secret"}, "resource_group": "WORKSPACE"}).OK(&ta)
	id := ta["trusted_account_id"]
	var first, second map[string]any
	owner.Call("/identity/trusted-account/sync", map[string]any{"trusted_account_id": id}).OK(&first)
	owner.Call("/identity/trusted-account/sync", map[string]any{"trusted_account_id": id}).OK(&second)
	var l list
	member.Call(jp+"list", map[string]any{"trusted_account_id": id}).OK(&l)
	if l.TotalCount != 2 || l.Results[0]["job_id"] != second["job_id"] || l.Results[0]["status"] != "IN_PROGRESS" ||
		l.Results[1]["status"] != "CANCELED" || l.Results[1]["finished_at"] == "" || l.Results[0]["workspace_id"] != ws {
		t.Fatalf("job/list = %v", l.Results)
	}
	var j map[string]any
	owner.Call("/identity/v2/job/get", map[string]any{"job_id": second["job_id"]}).OK(&j)
	for _, k := range []string{"job_id", "status", "trusted_account_id", "error_message", "finished_at", "created_at", "workspace_id", "domain_id"} {
		if _, ok := j[k]; !ok {
			t.Fatalf("job/get lacks %s: %v", k, j)
		}
	}
	if n := identitytest.StatCount(h.Admin, jp+"stat", nil); n != 2 {
		t.Fatalf("stat %d", n)
	}
	if n := identitytest.ListCount(t, otherOwner, jp+"list", map[string]any{}); n != 0 {
		t.Fatalf("another workspace lists %d", n)
	}
	_, boss := h.NewDomain("other")
	frozen := h.DBFrozen(core.JobsCollection)
	for _, c := range []*testkit.Client{otherOwner, boss} {
		c.Call(jp+"get", map[string]any{"job_id": first["job_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.Call(jp+"delete", map[string]any{"job_id": first["job_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	member.Call(jp+"delete", map[string]any{"job_id": first["job_id"]}).Fails(http.StatusForbidden, errs.PermissionDenied)
	owner.Call(jp+"list", map[string]any{"status": "DONE"}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	frozen()
	owner.Call(jp+"delete", map[string]any{"job_id": first["job_id"]}).OK(nil)
	if n := identitytest.ListCount(t, owner, jp+"list", map[string]any{"trusted_account_id": id}); n != 1 {
		t.Fatalf("after delete %d", n)
	}
}

// TestJobTenancy: outsiders of a workspace's sync job read and delete
// nothing of it.
func TestJobTenancy(t *testing.T) {
	h := identitytest.New(t, identitytest.Mount(job.Routes, trustedaccount.Routes, workspace.Routes, rolebinding.Routes))
	ws, owner, _ := h.WorkspaceUsers("ws")
	var ta, j map[string]any
	owner.Call("/identity/trusted-account/create", map[string]any{"name": "t", "data": map[string]any{"account_id": "1"}, "provider": "aws",
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAJOBS", "aws_secret_access_key": "jobs-secret"}, "resource_group": "WORKSPACE"}).OK(&ta)
	owner.Call("/identity/trusted-account/sync", map[string]any{"trusted_account_id": ta["trusted_account_id"]}).OK(&j)
	id := j["job_id"].(string)
	testkit.Tenancy{
		Handler: h.Handler, Coll: h.DB.Collection(core.JobsCollection), ID: id, Domain: h.Domain, Workspace: ws,
		Get:     testkit.Req{Path: jp + "get", Body: map[string]any{"job_id": id}},
		List:    testkit.Req{Path: jp + "list", Body: map[string]any{"job_id": id}},
		Changes: []testkit.Req{{Path: jp + "delete", Body: map[string]any{"job_id": id}}},
		Insider: auth.Principal{DomainID: h.Domain, UserID: "ws-owner", Role: auth.WorkspaceOwner, WorkspaceID: ws},
		Enroll:  h.Enroll,
		NoToken: true,
	}.Run(t)
}
