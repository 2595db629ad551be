package trustedaccount_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/projectgroup"
	"github.com/nubes-io/nubes/services/identity/internal/serviceaccount"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

var saIDPattern = regexp.MustCompile(`^sa-[0-9a-f]{12}$`)

const syncMethod = "spaceone.api.identity.plugin.AccountCollector/sync"

// syncStack is identity with trusted-account sync running: its own NATS
// (the sync consumer is durable and shared), an account collector plugin
// for aws, a stand-in secret service, and replicas identity instances on
// one database.
type syncStack struct {
	db      *mongo.Database
	plugin  *fakeplugin.Server
	system  *testkit.Client
	h       *identitytest.Harness
	secrets *fakeSecrets
}

// fakeSecrets stands in for the secret service: it keeps the secrets a
// sync stores, with the caller who asked.
type fakeSecrets struct {
	mu      sync.Mutex
	secrets map[string]map[string]any // secret_id -> create body (data replaced by update-data)
	callers []auth.Principal
	fake    *testkit.Fake
}

func newFakeSecrets(t *testing.T) *fakeSecrets {
	f := &fakeSecrets{secrets: map[string]map[string]any{}}
	f.fake = testkit.StartFake(t).
		Handle(serviceaccount.SecretCreatePath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			id := wire.NewID("secret")
			f.secrets[id] = req
			f.callers = append(f.callers, *p)
			return map[string]any{"secret_id": id}, nil
		}).
		Handle(serviceaccount.SecretListPath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			n := 0
			if _, ok := f.secrets[testkit.Str(req, "secret_id")]; ok {
				n = 1
			}
			return map[string]any{"results": []any{}, "total_count": n}, nil
		}).
		Handle(serviceaccount.SecretUpdateDataPath, func(p *auth.Principal, req map[string]any) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.secrets[testkit.Str(req, "secret_id")]["data"] = req["data"]
			f.callers = append(f.callers, *p)
			return map[string]any{}, nil
		})
	return f
}

func (f *fakeSecrets) get(id string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.secrets[id]
}

func (f *fakeSecrets) n() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.secrets) }

func newSyncStack(t *testing.T, replicas int) *syncStack {
	t.Helper()
	return newSyncStackWith(t, replicas, nil)
}

// newSyncStackWith is newSyncStack with change applied to each replica's
// config after the stack's.
func newSyncStackWith(t *testing.T, replicas int, change func(*core.Config)) *syncStack {
	t.Helper()
	env := testkit.Get()
	n := testkit.StartNATS(t)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	plugins, err := plugin.New(map[string]string{"plugin-aws-account": fp.Endpoint}, plugin.Options{ReadyTimeout: 300 * time.Millisecond, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugins.Close() })
	st := &syncStack{db: env.Database(t), plugin: fp, secrets: newFakeSecrets(t)}
	// A replica runs what identity.Build runs for sync: the mail outbox and
	// the sync workers, on the stack's NATS, database and keys.
	opt := identitytest.Options{NATS: n.URL(), DB: st.db, CipherSpec: core.RandomCipherSpec(), Workers: trustedaccount.Workers,
		Config: func(c *core.Config) {
			c.Plugins, c.AccountCollectors, c.SyncScheduleTick = plugins, map[string]string{"aws": "plugin-aws-account"}, 100*time.Millisecond
			c.ServiceURLs = map[string]string{"secret": st.secrets.fake.URL}
			if change != nil {
				change(c)
			}
		}}
	for i := range replicas {
		h := identitytest.New(t, identitytest.Mount(trustedaccount.Routes, serviceaccount.Routes, workspace.Routes), opt)
		if i == 0 {
			st.system, st.h = h.System, h
		}
	}
	return st
}

func (st *syncStack) job(t *testing.T, id string) trustedaccount.IdentityJob {
	t.Helper()
	var j trustedaccount.IdentityJob
	if err := st.db.Collection(core.JobsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&j); err != nil {
		t.Fatal(err)
	}
	return j
}

func (st *syncStack) waitJob(t *testing.T, id string) trustedaccount.IdentityJob {
	t.Helper()
	var j trustedaccount.IdentityJob
	identitytest.Eventually(t, 15*time.Second, "sync job "+id, func() bool {
		j = st.job(t, id)
		return j.Status != "IN_PROGRESS"
	})
	return j
}

func (st *syncStack) createAccount(t *testing.T, provider string, schedule map[string]any) string {
	t.Helper()
	body := map[string]any{"name": provider + " payer", "data": map[string]any{"account_id": "999999999999"}, "provider": provider, "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIASYNC", "aws_secret_access_key": "sync-s3cr3t"}, "resource_group": "DOMAIN",
		"plugin_options": map[string]any{"accounts": "all"}}
	if provider == "azure" { // a provider identity has no collector plugin for here
		body["data"], body["secret_schema_id"] = map[string]any{"tenant_id": "tenant-1", "subscription_id": "sub-1"}, "azure-secret-client-secret"
		body["secret_data"] = map[string]any{"tenant_id": "tenant-1", "subscription_id": "sub-1", "client_id": "client-1", "client_secret": "azure-s3cr3t"}
	}
	if schedule != nil {
		body["schedule"] = schedule
	}
	var a map[string]any
	st.system.Call("/identity/v2/trusted-account/create", body).OK(&a)
	return a["trusted_account_id"].(string)
}

func (st *syncStack) sync(t *testing.T, id string) string {
	t.Helper()
	var j map[string]any
	st.system.Call("/identity/v2/trusted-account/sync", map[string]any{"trusted_account_id": id}).OK(&j)
	return j["job_id"].(string)
}

// synced are the service accounts of the stack's database, by the
// plugin's resource_id.
func (st *syncStack) synced(t *testing.T) map[string]core.ServiceAccount {
	t.Helper()
	out := map[string]core.ServiceAccount{}
	for _, d := range all[core.ServiceAccount](t, st.db.Collection(core.ServiceAccountsCollection)) {
		out[d.ReferenceID] = d
	}
	return out
}

func all[T any](t *testing.T, c *mongo.Collection) []T {
	t.Helper()
	cur, err := c.Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []T
	if err := cur.All(context.Background(), &docs); err != nil {
		t.Fatal(err)
	}
	return docs
}

// byName indexes records by their name.
func byName[T any](docs []T, name func(T) string) map[string]T {
	out := map[string]T{}
	for _, d := range docs {
		out[name(d)] = d
	}
	return out
}

// TestTrustedAccountSync: a sync job runs the provider's account
// collector and places each account it reports as upstream's sync does:
// a workspace (a DOMAIN account's), project groups, a PRIVATE project and
// a managed general service account with a PROJECT secret naming the
// trusted secret; a second sync changes the same records in place.
func TestTrustedAccountSync(t *testing.T) {
	st := newSyncStack(t, 1)
	id := st.createAccount(t, "aws", nil)
	var ta map[string]any
	st.system.Call("/identity/v2/trusted-account/get", map[string]any{"trusted_account_id": id}).OK(&ta)
	eng := []any{map[string]any{"name": "Engineering", "resource_id": "ou-eng"}, map[string]any{"name": "Platform", "resource_id": "ou-plat"}}
	role := func(n string) map[string]any { return map[string]any{"role_arn": "arn:aws:iam::" + n + ":role/Nubes"} }
	st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{
		map[string]any{"name": "Dev", "resource_id": "111111111111", "data": map[string]any{"account_id": "111111111111"},
			"tags": map[string]any{"team": "a"}, "secret_data": role("111111111111"), "secret_schema_id": "aws-secret-assume-role", "location": eng},
		map[string]any{"name": "Prod", "resource_id": "222222222222", "data": map[string]any{"account_id": "222222222222"},
			"location": []any{map[string]any{"name": "Engineering", "resource_id": "ou-eng"}}},
		map[string]any{"name": "Nowhere", "resource_id": "999999999999"}, // a domain account's result without a location: skipped
	}}}, fakeplugin.Reply{Result: map[string]any{"results": []any{
		map[string]any{"name": "Dev renamed", "resource_id": "111111111111", "data": map[string]any{"account_id": "111111111111", "x": 1},
			"secret_data": role("111111111112"), "secret_schema_id": "aws-secret-assume-role", "location": eng},
		map[string]any{"name": "Prod", "resource_id": "222222222222", "location": []any{map[string]any{"name": "Engineering", "resource_id": "ou-eng"}}},
		map[string]any{"name": "Stage", "resource_id": "333333333333", "secret_data": role("333333333333"), "secret_schema_id": "aws-secret-assume-role",
			"location": []any{map[string]any{"name": "Engineering", "resource_id": "ou-eng"}}},
	}}})
	j := st.waitJob(t, st.sync(t, id))
	if j.Status != "SUCCESS" || j.SuccessTasks != 1 || j.RemainedTasks != 0 || j.ErrorCode != "" || j.FinishedAt.IsZero() {
		t.Fatalf("job: %+v", j)
	}
	req := st.plugin.Calls(syncMethod)[0].Request
	sd, _ := req["secret_data"].(map[string]any)
	opts, _ := req["options"].(map[string]any)
	if sd["aws_secret_access_key"] != "sync-s3cr3t" || req["schema_id"] != "aws-secret-access-key" || opts["accounts"] != "all" || req["domain_id"] == "" {
		t.Fatalf("sync request: %v", req)
	}

	// The DOMAIN account's results land in the workspace of their first
	// location entry, the rest are groups.
	workspaces := byName(all[core.Workspace](t, st.db.Collection(core.WorkspacesCollection)), func(w core.Workspace) string { return w.Name })
	ws := workspaces["Engineering"]
	groups := all[projectgroup.ProjectGroup](t, st.db.Collection(projectgroup.Collection))
	projects := byName(all[core.Project](t, st.db.Collection(core.ProjectsCollection)), func(p core.Project) string { return p.Name })
	if ws.WorkspaceID == "" || ws.State != "ENABLED" || len(groups) != 1 || groups[0].Name != "Platform" || groups[0].WorkspaceID != ws.WorkspaceID ||
		groups[0].ParentGroupID != "" || len(projects) != 2 {
		t.Fatalf("places: %+v / %+v / %+v", workspaces, groups, projects)
	}
	if dev := projects["Dev"]; dev.ProjectType != "PRIVATE" || dev.WorkspaceID != ws.WorkspaceID || dev.ProjectGroupID != groups[0].ProjectGroupID {
		t.Fatalf("project Dev: %+v", dev)
	}
	if prod := projects["Prod"]; prod.ProjectGroupID != "" || prod.WorkspaceID != ws.WorkspaceID {
		t.Fatalf("project Prod: %+v", prod)
	}
	got := st.synced(t)
	dev, prod := got["111111111111"], got["222222222222"]
	if len(got) != 2 || !saIDPattern.MatchString(dev.ServiceAccountID) || dev.Name != "Dev" || dev.Provider != "aws" || !dev.IsManaged ||
		dev.TrustedAccountID != id || dev.State != "ACTIVE" || dev.WorkspaceID != ws.WorkspaceID || dev.ProjectID != projects["Dev"].ProjectID ||
		dev.Tags["team"] != "a" || dev.Data["account_id"] != "111111111111" || dev.LastSyncedAt.IsZero() || dev.SecretSchemaID != "aws-secret-assume-role" ||
		dev.SecretID == "" || prod.SecretID != "" || prod.ProjectID != projects["Prod"].ProjectID {
		t.Fatalf("synced: %+v", got)
	}
	// The keys are a PROJECT secret naming the trusted secret, stored by a
	// SYSTEM caller of the account's domain; none stays in identity.
	sec := st.secrets.get(dev.SecretID)
	if sec["name"] != dev.ServiceAccountID+"-secret" || sec["resource_group"] != "PROJECT" || sec["service_account_id"] != dev.ServiceAccountID ||
		sec["trusted_secret_id"] != ta["trusted_secret_id"] || sec["schema_id"] != "aws-secret-assume-role" ||
		sec["data"].(map[string]any)["role_arn"] != "arn:aws:iam::111111111111:role/Nubes" {
		t.Fatalf("secret: %v", sec)
	}
	if c := st.secrets.callers[0]; !c.IsService() || c.DomainID != st.h.Domain {
		t.Fatalf("secret stored by %+v", c)
	}
	for _, d := range all[bson.Raw](t, st.db.Collection(core.ServiceAccountsCollection)) {
		if strings.Contains(d.String(), "role_arn") {
			t.Fatalf("keys kept in identity: %s", d)
		}
	}
	// "Attached accounts", as the console asks.
	var attached struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	st.system.Call("/identity/v2/service-account/list", map[string]any{"query": map[string]any{"sort": []any{map[string]any{"key": "created_at", "desc": true}},
		"page": map[string]any{"limit": 15}, "filter": []any{map[string]any{"k": "trusted_account_id", "v": id, "o": "eq"}}}}).OK(&attached)
	if attached.TotalCount != 2 {
		t.Fatalf("attached: %+v", attached)
	}

	// Synced again: the same records changed in place, the new one added,
	// the existing secret's data replaced (no second secret).
	st.waitJob(t, st.sync(t, id))
	got = st.synced(t)
	if len(got) != 3 || got["111111111111"].Name != "Dev renamed" || got["111111111111"].ID != dev.ID || got["111111111111"].SecretID != dev.SecretID ||
		got["222222222222"].ID != prod.ID || got["333333333333"].Name != "Stage" || got["333333333333"].SecretID == "" ||
		!got["111111111111"].LastSyncedAt.After(dev.LastSyncedAt.Time) {
		t.Fatalf("second sync: %+v", got)
	}
	if n := st.secrets.n(); n != 2 || st.secrets.get(dev.SecretID)["data"].(map[string]any)["role_arn"] != "arn:aws:iam::111111111112:role/Nubes" {
		t.Fatalf("secrets after the second sync: %d %v", n, st.secrets.get(dev.SecretID))
	}
	if n := len(all[core.Workspace](t, st.db.Collection(core.WorkspacesCollection))); n != len(workspaces) {
		t.Fatalf("workspaces: %d, want %d", n, len(workspaces))
	}
	if n := len(all[projectgroup.ProjectGroup](t, st.db.Collection(projectgroup.Collection))); n != 1 {
		t.Fatalf("groups: %d", n)
	}
	if n := len(all[core.Project](t, st.db.Collection(core.ProjectsCollection))); n != 3 {
		t.Fatalf("projects: %d", n)
	}
	// Nubes' older trusted service accounts are not made any more.
	if n := len(all[core.TrustedServiceAccount](t, st.db.Collection(core.TrustedSACollection))); n != 0 {
		t.Fatalf("trusted service accounts: %d", n)
	}

	t.Run("bad keys from the plugin end the job", func(t *testing.T) {
		before := st.secrets.n()
		st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{
			map[string]any{"name": "Bad", "resource_id": "444444444444", "secret_data": map[string]any{"external_id": "x"}, "secret_schema_id": "aws-secret-assume-role",
				"location": []any{map[string]any{"name": "Engineering", "resource_id": "ou-eng"}}}}}},
			fakeplugin.Reply{Result: map[string]any{"results": []any{
				map[string]any{"name": "Bad 2", "resource_id": "555555555555", "secret_data": role("5"), "secret_schema_id": "aws-secret-access-key",
					"location": []any{map[string]any{"name": "Engineering", "resource_id": "ou-eng"}}}}}},
			fakeplugin.Reply{Result: map[string]any{"results": []any{map[string]any{"name": "No id"}}}})
		for _, code := range []string{errs.InvalidParameter, errs.SchemaIDNotDefined, errs.RequiredParameter} {
			j := st.waitJob(t, st.sync(t, id))
			if j.Status != "FAILURE" || j.ErrorCode != code || strings.Contains(j.ErrorMessage, "arn:") {
				t.Fatalf("job: %+v, want %s", j, code)
			}
		}
		if st.secrets.n() != before {
			t.Fatalf("a secret was stored: %d", st.secrets.n())
		}
		if a, ok := st.synced(t)["444444444444"]; ok {
			t.Fatalf("an account with bad keys was stored: %+v", a)
		}
	})
	t.Run("a workspace account's sync stays in its workspace", func(t *testing.T) {
		wsID, owner, _ := st.h.WorkspaceUsers("synced")
		var wa map[string]any
		owner.Call("/identity/v2/trusted-account/create", map[string]any{"name": "ws payer", "data": map[string]any{"account_id": "1"}, "provider": "aws",
			"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAWS", "aws_secret_access_key": "ws-s3cr3t"},
			"resource_group": "WORKSPACE", "sync_options": map[string]any{"skip_project_group": true}}).OK(&wa)
		st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{
			map[string]any{"name": "Team", "resource_id": "666666666666", "location": eng}}}})
		var j map[string]any
		owner.Call("/identity/v2/trusted-account/sync", map[string]any{"trusted_account_id": wa["trusted_account_id"]}).OK(&j)
		if j := st.waitJob(t, j["job_id"].(string)); j.Status != "SUCCESS" {
			t.Fatalf("job: %+v", j)
		}
		a := st.synced(t)["666666666666"]
		if a.WorkspaceID != wsID || a.TrustedAccountID != wa["trusted_account_id"] || a.SecretID != "" {
			t.Fatalf("account: %+v", a)
		}
		if n := len(all[projectgroup.ProjectGroup](t, st.db.Collection(projectgroup.Collection))); n != 1 {
			t.Fatalf("skip_project_group made groups: %d", n)
		}
		var l struct {
			TotalCount int `json:"total_count"`
		}
		owner.Call("/identity/v2/service-account/list", map[string]any{"trusted_account_id": wa["trusted_account_id"]}).OK(&l)
		if l.TotalCount != 1 {
			t.Fatalf("the owner sees %d", l.TotalCount)
		}
		owner.Call("/identity/v2/service-account/list", map[string]any{"trusted_account_id": id}).OK(&l)
		if l.TotalCount != 0 {
			t.Fatalf("the owner sees the domain's synced accounts of another workspace: %d", l.TotalCount)
		}
	})
	t.Run("a domain account synced into one workspace", func(t *testing.T) {
		wsID, _, _ := st.h.WorkspaceUsers("single")
		mk := func(single string) string {
			var a map[string]any
			st.system.Call("/identity/v2/trusted-account/create", map[string]any{"name": "single " + single, "data": map[string]any{"account_id": "1"}, "provider": "aws",
				"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIASINGLE", "aws_secret_access_key": "single-s3cr3t"},
				"resource_group": "DOMAIN", "sync_options": map[string]any{"single_workspace_id": single}}).OK(&a)
			return a["trusted_account_id"].(string)
		}
		one, missing := mk(wsID), mk("workspace-000000000000")
		st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{
			map[string]any{"name": "Single", "resource_id": "777777777777", "location": []any{map[string]any{"name": "Ops", "resource_id": "ou-ops"}}}}}},
			fakeplugin.Reply{Result: map[string]any{"results": []any{
				map[string]any{"name": "Lost", "resource_id": "888888888888", "location": []any{map[string]any{"name": "Ops", "resource_id": "ou-ops"}}}}}})
		if j := st.waitJob(t, st.sync(t, one)); j.Status != "SUCCESS" {
			t.Fatalf("job: %+v", j)
		}
		a := st.synced(t)["777777777777"]
		groups := byName(all[projectgroup.ProjectGroup](t, st.db.Collection(projectgroup.Collection)), func(g projectgroup.ProjectGroup) string { return g.Name })
		if a.WorkspaceID != wsID || groups["Ops"].WorkspaceID != wsID { // every location entry is a group there (upstream)
			t.Fatalf("account %+v, groups %+v", a, groups)
		}
		if j := st.waitJob(t, st.sync(t, missing)); j.Status != "FAILURE" || j.ErrorCode != errs.NotFoundCode {
			t.Fatalf("job into a missing workspace: %+v", j)
		}
		if _, ok := st.synced(t)["888888888888"]; ok {
			t.Fatal("an account was placed in no workspace")
		}
	})
	t.Run("plugin failure", func(t *testing.T) {
		st.plugin.Script(syncMethod, fakeplugin.Reply{Err: fakeplugin.Fail(codes.PermissionDenied, "ERROR_AUTHENTICATE_FAILURE", "bad credentials")})
		j := st.waitJob(t, st.sync(t, id))
		if j.Status != "FAILURE" || j.FailureTasks != 1 || j.ErrorCode != "ERROR_AUTHENTICATE_FAILURE" || j.ErrorMessage != "bad credentials" {
			t.Fatalf("job: %+v", j)
		}
	})
	t.Run("no plugin for the provider", func(t *testing.T) {
		gcp := st.createAccount(t, "azure", nil)
		j := st.waitJob(t, st.sync(t, gcp))
		if j.Status != "FAILURE" || j.ErrorCode != "ERROR_NO_PLUGIN_ENDPOINT" {
			t.Fatalf("job: %+v", j)
		}
	})
	t.Run("a later sync cancels a running one", func(t *testing.T) {
		st.plugin.Script(syncMethod, fakeplugin.Reply{Delay: time.Second, Result: map[string]any{"results": []any{}}})
		first := st.sync(t, id)
		second := st.sync(t, id)
		if j := st.job(t, first); j.Status != "CANCELED" {
			t.Fatalf("first: %+v", j)
		}
		if j := st.waitJob(t, second); j.Status != "SUCCESS" {
			t.Fatalf("second: %+v", j)
		}
		if j := st.job(t, first); j.Status != "CANCELED" {
			t.Fatalf("first after the worker: %+v", j)
		}
	})
}

// TestTrustedAccountSyncSchedule: an account whose schedule holds the
// clock's hour syncs once, whatever the number of replicas.
func TestTrustedAccountSyncSchedule(t *testing.T) {
	// Both replicas fire on the test's clock, stopped in an hour of the
	// schedule; ticks counts each replica's looks at it (one per tick).
	clock := testkit.StoppedClock(time.Date(2026, 5, 1, 5, 10, 0, 0, time.UTC))
	var ticks []*atomic.Int64
	st := newSyncStackWith(t, 2, func(c *core.Config) {
		n := &atomic.Int64{}
		ticks = append(ticks, n)
		c.SyncScheduleTick = 20 * time.Millisecond
		c.SyncScheduleClock = func() time.Time { n.Add(1); return clock.Now() }
	})
	st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{map[string]any{"name": "Dev", "resource_id": "1"}}}})
	hour := clock.Now().Hour()
	id := st.createAccount(t, "aws", map[string]any{"state": "ENABLED", "hours": []int{hour}})
	st.createAccount(t, "aws", map[string]any{"state": "DISABLED", "hours": []int{hour}})
	var jobs []trustedaccount.IdentityJob
	identitytest.Eventually(t, 10*time.Second, "a scheduled sync", func() bool {
		cur, err := st.db.Collection(core.JobsCollection).Find(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		jobs = nil
		if err := cur.All(context.Background(), &jobs); err != nil {
			t.Fatal(err)
		}
		return len(jobs) > 0 && jobs[0].Status == "SUCCESS"
	})
	// Two more ticks of both replicas finished: a second sync of the hour
	// would be recorded by now.
	for i, n := range ticks {
		from := n.Load()
		// Tick from+1 started, so tick from+2 finished.
		identitytest.Eventually(t, 10*time.Second, fmt.Sprintf("replica %d's ticks", i), func() bool { return n.Load() >= from+3 })
	}
	n, _ := st.db.Collection(core.JobsCollection).CountDocuments(context.Background(), bson.D{})
	if n != 1 || jobs[0].TrustedAccountID != id || jobs[0].CreatedBy != "schedule" {
		t.Fatalf("%d jobs: %+v", n, jobs)
	}
}
