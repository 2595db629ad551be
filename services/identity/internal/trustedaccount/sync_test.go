package trustedaccount_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
)

const syncMethod = "spaceone.api.identity.plugin.AccountCollector/sync"

// syncStack is identity with trusted-account sync running: its own NATS
// (the sync consumer is durable and shared), an account collector plugin
// for aws, and replicas identity instances on one database.
type syncStack struct {
	db     *mongo.Database
	plugin *fakeplugin.Server
	system *testkit.Client
}

func newSyncStack(t *testing.T, replicas int) *syncStack {
	t.Helper()
	env := testkit.Get()
	n := testkit.StartNATS(t)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	plugins, err := plugin.New(map[string]string{"plugin-aws-account": fp.Endpoint}, plugin.Options{ReadyTimeout: 300 * time.Millisecond, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugins.Close() })
	st := &syncStack{db: env.Database(t), plugin: fp}
	// A replica runs what identity.Build runs for sync: the mail outbox and
	// the sync workers, on the stack's NATS, database and keys.
	opt := identitytest.Options{NATS: n.URL(), DB: st.db, CipherSpec: core.RandomCipherSpec(), Workers: trustedaccount.Workers,
		Config: func(c *core.Config) {
			c.Plugins, c.AccountCollectors, c.SyncScheduleTick = plugins, map[string]string{"aws": "plugin-aws-account"}, 100*time.Millisecond
		}}
	for i := range replicas {
		h := identitytest.New(t, trustedaccount.Routes, opt)
		if i == 0 {
			st.system = h.System
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

func (st *syncStack) synced(t *testing.T) map[string]core.TrustedServiceAccount {
	t.Helper()
	cur, err := st.db.Collection(core.TrustedSACollection).Find(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []core.TrustedServiceAccount
	if err := cur.All(context.Background(), &docs); err != nil {
		t.Fatal(err)
	}
	out := map[string]core.TrustedServiceAccount{}
	for _, d := range docs {
		out[d.ResourceID] = d
	}
	return out
}

// TestTrustedAccountSync: a sync job runs the provider's account
// collector and upserts the trusted service accounts it reports.
func TestTrustedAccountSync(t *testing.T) {
	st := newSyncStack(t, 1)
	id := st.createAccount(t, "aws", nil)
	st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{
		map[string]any{"name": "Dev", "resource_id": "111111111111", "data": map[string]any{"account_id": "111111111111"},
			"tags": map[string]any{"team": "a"}, "secret_data": map[string]any{"role_arn": "arn:role/dev"}},
		map[string]any{"name": "Prod", "resource_id": "222222222222", "data": map[string]any{"account_id": "222222222222"}},
	}}}, fakeplugin.Reply{Result: map[string]any{"results": []any{
		map[string]any{"name": "Dev renamed", "resource_id": "111111111111", "data": map[string]any{"account_id": "111111111111", "x": 1}},
		map[string]any{"name": "Stage", "resource_id": "333333333333"},
	}}})
	j := st.waitJob(t, st.sync(t, id))
	if j.Status != "SUCCESS" || j.SuccessTasks != 1 || j.RemainedTasks != 0 || j.ErrorCode != "" || j.FinishedAt.IsZero() {
		t.Fatalf("job: %+v", j)
	}
	got := st.synced(t)
	dev := got["111111111111"]
	if len(got) != 2 || dev.Name != "Dev" || dev.Provider != "aws" || dev.Scope != "DOMAIN" || dev.WorkspaceID != "*" ||
		dev.Tags["team"] != "a" || dev.TrustedAccountID != id {
		t.Fatalf("synced: %+v", got)
	}
	req := st.plugin.Calls(syncMethod)[0].Request
	sd, _ := req["secret_data"].(map[string]any)
	opts, _ := req["options"].(map[string]any)
	if sd["aws_secret_access_key"] != "sync-s3cr3t" || req["schema_id"] != "aws-secret-access-key" || opts["accounts"] != "all" || req["domain_id"] == "" {
		t.Fatalf("sync request: %v", req)
	}
	// Synced again: updated in place, the new one added.
	st.waitJob(t, st.sync(t, id))
	got = st.synced(t)
	if len(got) != 3 || got["111111111111"].Name != "Dev renamed" || got["111111111111"].ID != dev.ID || got["333333333333"].Name != "Stage" {
		t.Fatalf("second sync: %+v", got)
	}
	// The reported secret data is kept nowhere.
	for _, d := range got {
		if d.Data["role_arn"] != nil {
			t.Fatalf("secret data kept: %+v", d)
		}
	}

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
// current hour syncs once, whatever the number of replicas.
func TestTrustedAccountSyncSchedule(t *testing.T) {
	st := newSyncStack(t, 2)
	st.plugin.Script(syncMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{map[string]any{"name": "Dev", "resource_id": "1"}}}})
	hour := time.Now().UTC().Hour()
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
	time.Sleep(500 * time.Millisecond) // several more ticks of both replicas
	n, _ := st.db.Collection(core.JobsCollection).CountDocuments(context.Background(), bson.D{})
	if n != 1 || jobs[0].TrustedAccountID != id || jobs[0].CreatedBy != "schedule" {
		t.Fatalf("%d jobs: %+v", n, jobs)
	}
}
