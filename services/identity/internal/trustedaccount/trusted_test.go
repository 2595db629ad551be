package trustedaccount_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/trustedaccount"
	"github.com/nubes-io/nubes/services/identity/internal/trustedserviceaccount"
	"github.com/nubes-io/nubes/services/identity/internal/workspace"
)

var (
	taIDPattern     = regexp.MustCompile(`^ta-[0-9a-f]{12}$`)
	secretIDPattern = regexp.MustCompile(`^trusted-secret-[0-9a-f]{12}$`)
	tsaIDPattern    = regexp.MustCompile(`^tsa-[0-9a-f]{12}$`)
	jobIDPattern    = regexp.MustCompile(`^job-[0-9a-f]{12}$`)
)

var taFields = []string{"trusted_account_id", "name", "data", "provider", "schedule", "sync_options", "plugin_options", "tags",
	"resource_group", "domain_id", "workspace_id", "secret_schema_id", "trusted_secret_id", "created_at"}

var tsaFields = []string{"trusted_service_account_id", "name", "data", "provider", "tags", "scope", "domain_id", "workspace_id", "created_at"}

// secrets are the plaintexts a test stores as secret data; no response
// and no stored byte may ever show them.
type secrets struct {
	t      *testing.T
	values []string
}

func (s *secrets) add(v string) string { s.values = append(s.values, v); return v }

// clean fails when body shows a secret value or a secret_data member.
func (s *secrets) clean(what string, body []byte) {
	s.t.Helper()
	if bytes.Contains(body, []byte(`"secret_data"`)) || bytes.Contains(body, []byte(`"sealed"`)) {
		s.t.Fatalf("%s shows secret data: %s", what, body)
	}
	for _, v := range s.values {
		if bytes.Contains(body, []byte(v)) {
			s.t.Fatalf("%s shows the secret %q: %s", what, v, body)
		}
	}
}

// call makes a request and checks its answer for secrets.
func (s *secrets) call(c *testkit.Client, path string, body any) *testkit.Response {
	s.t.Helper()
	r := c.Call(path, body)
	s.clean(path, r.Body)
	return r
}

// jobEvents records the identity job events published from now on.
func jobEvents(t *testing.T) func(jobID string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bus, err := events.Connect(ctx, testkit.Get().NATS.URL, "identity-test-jobs", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := bus.JS.OrderedConsumer(ctx, events.JobStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{trustedaccount.JobSubject}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]map[string]any{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev map[string]any
		if json.Unmarshal(m.Data(), &ev) == nil {
			mu.Lock()
			got[m.Headers().Get("Nats-Msg-Id")] = ev
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return func(jobID string) map[string]any {
		t.Helper()
		var ev map[string]any
		identitytest.Eventually(t, 10*time.Second, "job event "+jobID, func() bool {
			mu.Lock()
			defer mu.Unlock()
			ev = got[jobID]
			return ev != nil
		})
		return ev
	}
}

func TestTrustedAccount(t *testing.T) {
	h := newHarness(t)
	sec := &secrets{t: t}
	nextJob := jobEvents(t)
	colls := []string{core.TrustedAccountsCollection, core.TrustedSecretsCollection, core.JobsCollection, "identity_outbox"}
	const ta = "/identity/v2/trusted-account/"
	secretValue := sec.add("AKIA-secret-" + time.Now().Format("150405.000000"))
	secretKey := sec.add("aws_secret_access_key_x9")

	create := map[string]any{
		"name": "AWS main", "data": map[string]any{"account_id": "123456789012", "nested": map[string]any{"a": []any{1, "b"}}}, "provider": "aws",
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{secretKey: secretValue, "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": secretValue},
		"resource_group": "DOMAIN", "tags": map[string]any{"env": "prod"}, "schedule": map[string]any{"state": "ENABLED", "hours": []int{9, 3, 9}},
	}
	var a map[string]any
	sec.call(h.Admin, ta+"create", create).OK(&a)
	identitytest.SameFields(t, "create", a, taFields...)
	id := a["trusted_account_id"].(string)
	if !taIDPattern.MatchString(id) || !secretIDPattern.MatchString(a["trusted_secret_id"].(string)) || a["workspace_id"] != "*" ||
		a["resource_group"] != "DOMAIN" || a["domain_id"] != h.Domain || a["provider"] != "aws" || a["secret_schema_id"] != "aws-secret-access-key" ||
		!identitytest.IsoMillis.MatchString(a["created_at"].(string)) {
		t.Fatalf("create = %v", a)
	}
	if s, _ := json.Marshal(a["schedule"]); string(s) != `{"hours":[3,9],"state":"ENABLED"}` {
		t.Fatalf("schedule = %s", s)
	}
	if d, _ := json.Marshal(a["data"]); string(d) != `{"account_id":"123456789012","nested":{"a":[1,"b"]}}` {
		t.Fatalf("data = %s", d)
	}

	// Stored encrypted: no plaintext in any stored byte, and the secret
	// record is sealed with a key version and a nonce.
	checkStored := func() {
		t.Helper()
		for _, c := range []string{core.TrustedAccountsCollection, core.TrustedSecretsCollection} {
			cur, err := h.DB.Collection(c).Find(context.Background(), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			var docs []bson.Raw
			if err := cur.All(context.Background(), &docs); err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				for _, v := range append(sec.values, "AKIAEXAMPLE") {
					if bytes.Contains(d, []byte(v)) || strings.Contains(d.String(), v) {
						t.Fatalf("%s stores %q in clear: %s", c, v, d)
					}
				}
			}
		}
		var stored struct {
			TrustedAccountID string `bson:"trusted_account_id"`
			Sealed           struct {
				KeyID string `bson:"key_id"`
				Nonce []byte `bson:"nonce"`
				Data  []byte `bson:"data"`
			} `bson:"sealed"`
		}
		if err := h.DB.Collection(core.TrustedSecretsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: a["trusted_secret_id"]}}).Decode(&stored); err != nil {
			t.Fatal(err)
		}
		if stored.TrustedAccountID != id || stored.Sealed.KeyID != "1" || len(stored.Sealed.Nonce) != 12 || len(stored.Sealed.Data) < 40 {
			t.Fatalf("sealed secret = %+v", stored)
		}
	}
	checkStored()

	// Refused requests store nothing.
	frozen := h.DBFrozen(colls...)
	bad := func(change func(m map[string]any)) map[string]any {
		m := map[string]any{}
		for k, v := range create {
			m[k] = v
		}
		change(m)
		return m
	}
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { delete(m, "secret_data") })).Fails(http.StatusBadRequest, errs.RequiredParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["secret_data"] = map[string]any{} })).Fails(http.StatusBadRequest, errs.RequiredParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { delete(m, "data") })).Fails(http.StatusBadRequest, errs.RequiredParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["resource_group"] = "PROJECT" })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["resource_group"] = "WORKSPACE" })).Fails(http.StatusBadRequest, errs.RequiredParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) {
		m["resource_group"] = "WORKSPACE"
		m["workspace_id"] = "workspace-000000000000"
	})).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["workspace_id"] = "workspace-000000000000" })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["schedule"] = map[string]any{"state": "ENABLED", "hours": []int{24}} })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["schedule"] = map[string]any{"state": "SOMETIMES"} })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["tags"] = map[string]any{"": "1"} })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["data"] = map[string]any{"a": map[string]any{"b\x00": ""}} })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["trusted_secret_id"] = "trusted-secret-mine" })).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"create", bad(func(m map[string]any) { m["name"] = 1 })).Fails(http.StatusBadRequest, errs.InvalidParameterType)
	// Checked against the provider's schemas and the provider (upstream's
	// order: provider when the account syncs, data, then keys).
	schemaBad := []struct {
		what   string
		change func(m map[string]any)
		status int
		code   string
	}{
		{"data without account_id", func(m map[string]any) { m["data"] = map[string]any{"nested": 1} }, http.StatusBadRequest, errs.InvalidParameter},
		{"data account_id a number", func(m map[string]any) { m["data"] = map[string]any{"account_id": 1} }, http.StatusBadRequest, errs.InvalidParameter},
		{"a provider without schemas", func(m map[string]any) { m["provider"] = "openstack"; delete(m, "schedule") }, http.StatusBadRequest, errs.SchemaNotDefined},
		{"an unknown provider that syncs", func(m map[string]any) { m["provider"] = "openstack" }, http.StatusNotFound, errs.NotFoundCode},
		{"a provider that cannot sync", func(m map[string]any) { m["provider"] = "kubernetes" }, http.StatusBadRequest, errs.InvalidParameter},
		{"kubernetes has no trusted account schema", func(m map[string]any) { m["provider"] = "kubernetes"; delete(m, "schedule") }, http.StatusBadRequest, errs.SchemaNotDefined},
		{"an unknown secret schema", func(m map[string]any) { m["secret_schema_id"] = "aws-access-key" }, http.StatusBadRequest, errs.SchemaIDNotDefined},
		{"a TRUSTING_SECRET schema", func(m map[string]any) {
			m["secret_schema_id"] = "aws-secret-assume-role"
			m["secret_data"] = map[string]any{"role_arn": "arn:aws:iam::1:role/x"}
		}, http.StatusBadRequest, errs.SchemaIDNotDefined},
		{"another provider's schema", func(m map[string]any) { m["secret_schema_id"] = "azure-secret-client-secret" }, http.StatusBadRequest, errs.InvalidParameter},
		{"keys without the secret key", func(m map[string]any) { m["secret_data"] = map[string]any{"aws_access_key_id": "AKIAEXAMPLE"} }, http.StatusBadRequest, errs.InvalidParameter},
		{"a key too short", func(m map[string]any) {
			m["secret_data"] = map[string]any{"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "x"}
		}, http.StatusBadRequest, errs.InvalidParameter},
	}
	for _, c := range schemaBad {
		r := sec.call(h.Admin, ta+"create", bad(c.change))
		if r.Status != c.status || !bytes.Contains(r.Body, []byte(c.code)) {
			t.Fatalf("%s: %d %s, want %d %s", c.what, r.Status, r.Body, c.status, c.code)
		}
	}
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "data": map[string]any{"x": 1}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"update-secret-data", map[string]any{"trusted_account_id": id, "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIAEXAMPLE"}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"update-secret-data", map[string]any{"trusted_account_id": id, "secret_schema_id": "aws-secret-assume-role",
		"secret_data": map[string]any{"role_arn": "arn:aws:iam::1:role/x"}}).Fails(http.StatusBadRequest, errs.SchemaIDNotDefined)
	user := h.Anon.As(h.DirectUser(h.Domain, "ulla", "Ulla-Passw0rd"))
	sec.call(user, ta+"create", create).Fails(http.StatusForbidden, errs.PermissionDenied)
	sec.call(user, ta+"get", map[string]any{"trusted_account_id": id}).Fails(http.StatusForbidden, errs.PermissionDenied)
	sec.call(user, ta+"list", nil).Fails(http.StatusForbidden, errs.PermissionDenied)
	sec.call(h.Anon, ta+"list", nil).Fails(http.StatusUnauthorized, errs.AuthenticateFailure)
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "name": strings.Repeat("x", 256)}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "schedule": map[string]any{"hours": []int{24}}}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": "ta-000000000000", "tags": map[string]any{}}).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(h.Admin, ta+"update-secret-data", map[string]any{"trusted_account_id": id, "secret_schema_id": "s"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	sec.call(h.Admin, ta+"sync", map[string]any{"trusted_account_id": "ta-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(h.Admin, ta+"delete", map[string]any{"trusted_account_id": "ta-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	// The console's rename sends the name alone: the rest stays.
	var renamed map[string]any
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "name": "AWS renamed"}).OK(&renamed)
	if renamed["name"] != "AWS renamed" || renamed["tags"].(map[string]any)["env"] != "prod" || renamed["schedule"].(map[string]any)["state"] != "ENABLED" {
		t.Fatalf("rename = %v", renamed)
	}
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "name": "AWS main"}).OK(nil)

	// Reads never show the secret.
	var got map[string]any
	sec.call(h.Admin, ta+"get", map[string]any{"trusted_account_id": id}).OK(&got)
	identitytest.SameFields(t, "get", got, taFields...)
	var list struct {
		Results    []map[string]any `json:"results"`
		TotalCount int              `json:"total_count"`
	}
	sec.call(h.Admin, ta+"list", nil).OK(&list)
	if list.TotalCount != 1 {
		t.Fatalf("list = %+v", list)
	}
	identitytest.SameFields(t, "list row", list.Results[0], taFields...)
	for _, body := range []map[string]any{
		{"provider": "aws"}, {"trusted_secret_id": a["trusted_secret_id"]}, {"secret_schema_id": "aws-secret-access-key"}, {"workspace_id": "*"},
		{"query": map[string]any{"keyword": "main"}}, {"name": "AWS main"}, {"trusted_account_id": id},
	} {
		sec.call(h.Admin, ta+"list", body).OK(&list)
		if list.TotalCount != 1 {
			t.Fatalf("list %v = %d", body, list.TotalCount)
		}
	}
	// Queries read only the fields of TrustedAccountInfo: another answers
	// as a field no account has; one naming the keys is refused.
	sec.call(h.Admin, ta+"list", map[string]any{"query": map[string]any{"only": []string{"sealed"}}}).OK(&list)
	if list.TotalCount != 1 || len(list.Results[0]) != 1 || list.Results[0]["name"] != "AWS main" { // the sort key alone, as upstream adds it
		t.Fatalf("only sealed = %+v", list)
	}
	for _, q := range []map[string]any{
		{"only": []string{"secret_data"}},
		{"filter": []any{map[string]any{"k": "secret_data", "v": true, "o": "exists"}}},
		{"filter": []any{map[string]any{"k": "secret_data.aws_secret_access_key", "v": secretValue, "o": "eq"}}},
		{"sort": []any{map[string]any{"key": "secret_data"}}},
	} {
		sec.call(h.Admin, ta+"list", map[string]any{"query": q}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
	if n := identitytest.StatCount(h.Admin, ta+"stat", nil); n != 1 {
		t.Fatalf("stat = %d", n)
	}
	for _, q := range []map[string]any{
		{"distinct": "secret_data"},
		{"distinct": "sealed"},
		{"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "trusted_account_id", "name": "id"}},
			"fields": []any{map[string]any{"name": "all", "operator": "push", "fields": []any{
				map[string]any{"key": "secret_data", "name": "s"}, map[string]any{"key": "sealed", "name": "x"}, map[string]any{"key": "data", "name": "d"}}}}}}}},
	} {
		sec.call(h.Admin, ta+"stat", map[string]any{"query": q}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}

	// update: tags replace; the rest changes when given.
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "tags": map[string]any{"team": "ops"}, "name": "AWS prod",
		"schedule": map[string]any{"state": "DISABLED", "hours": []int{}}, "sync_options": map[string]any{"skip": true}}).OK(&got)
	identitytest.SameFields(t, "update", got, taFields...)
	if got["name"] != "AWS prod" || got["tags"].(map[string]any)["team"] != "ops" || got["tags"].(map[string]any)["env"] != nil ||
		got["sync_options"].(map[string]any)["skip"] != true || got["provider"] != "aws" || got["data"].(map[string]any)["account_id"] != "123456789012" {
		t.Fatalf("update = %v", got)
	}
	sec.call(h.Admin, ta+"update", map[string]any{"trusted_account_id": id, "tags": map[string]any{}}).OK(&got)
	if len(got["tags"].(map[string]any)) != 0 || got["name"] != "AWS prod" {
		t.Fatalf("update with empty tags = %v", got)
	}

	// update-secret-data seals the new secret afresh.
	var oldSealed bson.Raw
	oldSealed, _ = h.DB.Collection(core.TrustedSecretsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: a["trusted_secret_id"]}}).Raw()
	newValue := sec.add("rotated-" + time.Now().Format("150405.000000"))
	sec.call(h.Admin, ta+"update-secret-data", map[string]any{"trusted_account_id": id, "secret_schema_id": "aws-control-tower-access-key",
		"secret_data": map[string]any{secretKey: newValue, "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": newValue, "role_name": "SpaceONERole", "external_id": "ext-0001"}}).OK(&got)
	if got["secret_schema_id"] != "aws-control-tower-access-key" || got["trusted_secret_id"] != a["trusted_secret_id"] {
		t.Fatalf("update-secret-data = %v", got)
	}
	newSealed, _ := h.DB.Collection(core.TrustedSecretsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: a["trusted_secret_id"]}}).Raw()
	if bytes.Equal(oldSealed.Lookup("sealed", "data").Value, newSealed.Lookup("sealed", "data").Value) ||
		bytes.Equal(oldSealed.Lookup("sealed", "nonce").Value, newSealed.Lookup("sealed", "nonce").Value) {
		t.Fatal("update-secret-data did not seal again")
	}
	checkStored()

	// sync: an IN_PROGRESS job record and a job event; a second sync
	// cancels the first job.
	var job map[string]any
	sec.call(h.Admin, ta+"sync", map[string]any{"trusted_account_id": id}).OK(&job)
	jobID, _ := job["job_id"].(string)
	if !jobIDPattern.MatchString(jobID) || job["status"] != "IN_PROGRESS" || job["trusted_account_id"] != id || job["domain_id"] != h.Domain ||
		job["workspace_id"] != "*" || !identitytest.IsoMillis.MatchString(job["created_at"].(string)) || job["finished_at"] != "" {
		t.Fatalf("sync = %v", job)
	}
	ev := nextJob(jobID)
	if ev["job_id"] != jobID || ev["trusted_account_id"] != id || ev["domain_id"] != h.Domain || ev["kind"] != "identity.trusted_account.sync" {
		t.Fatalf("job event = %v", ev)
	}
	evJSON, _ := json.Marshal(ev)
	sec.clean("job event", evJSON)
	var second map[string]any
	sec.call(h.Admin, ta+"sync", map[string]any{"trusted_account_id": id}).OK(&second)
	nextJob(second["job_id"].(string))
	var first struct {
		Status string `bson:"status"`
	}
	if err := h.DB.Collection(core.JobsCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: jobID}}).Decode(&first); err != nil || first.Status != "CANCELED" {
		t.Fatalf("first job after a second sync: %+v %v", first, err)
	}

	// delete removes the account and its secret.
	sec.call(h.Admin, ta+"delete", map[string]any{"trusted_account_id": id}).OK(nil)
	sec.call(h.Admin, ta+"get", map[string]any{"trusted_account_id": id}).Fails(http.StatusNotFound, errs.NotFoundCode)
	n, _ := h.DB.Collection(core.TrustedSecretsCollection).CountDocuments(context.Background(), bson.D{})
	if n != 0 {
		t.Fatalf("%d secrets left after delete", n)
	}
}

// Workspace owners manage their workspace's trusted accounts, members
// read them, and both read (not change) the domain-wide ones.
func TestTrustedAccountWorkspaces(t *testing.T) {
	h := newHarness(t)
	sec := &secrets{t: t}
	const ta = "/identity/v2/trusted-account/"
	wsA, owner, member := h.WorkspaceUsers("alpha")
	wsB, ownerB, _ := h.WorkspaceUsers("beta")
	secret := sec.add("workspace-secret-value")
	mk := func(c *testkit.Client, group, ws string) map[string]any {
		t.Helper()
		var a map[string]any
		sec.call(c, ta+"create", map[string]any{"name": group + ws, "data": map[string]any{"tenant_id": "t-1", "subscription_id": "s-1"}, "provider": "azure", "secret_schema_id": "azure-secret-client-secret",
			"secret_data": map[string]any{"key": secret, "subscription_id": "sub-0001", "tenant_id": "tenant-0001", "client_id": "client-0001", "client_secret": secret}, "resource_group": group, "workspace_id": ws}).OK(&a)
		return a
	}
	domainWide := mk(h.Admin, "DOMAIN", "")
	inA := mk(owner, "WORKSPACE", "")    // the owner's token names the workspace
	inB := mk(h.Admin, "WORKSPACE", wsB) // an admin names it
	if inA["workspace_id"] != wsA || inB["workspace_id"] != wsB || inA["resource_group"] != "WORKSPACE" {
		t.Fatalf("workspace records: %v / %v", inA, inB)
	}
	mk(ownerB, "WORKSPACE", wsB)

	frozen := h.DBFrozen(core.TrustedAccountsCollection, core.TrustedSecretsCollection, core.JobsCollection)
	create := map[string]any{"name": "x", "data": map[string]any{"tenant_id": "t-1", "subscription_id": "s-1"}, "provider": "azure", "secret_schema_id": "azure-secret-client-secret",
		"secret_data": map[string]any{"subscription_id": "sub-0001", "tenant_id": "tenant-0001", "client_id": "client-0001", "client_secret": "cs-01"}}
	withGroup := func(group, ws string) map[string]any {
		m := map[string]any{"resource_group": group, "workspace_id": ws}
		for k, v := range create {
			m[k] = v
		}
		return m
	}
	sec.call(owner, ta+"create", withGroup("DOMAIN", "")).Fails(http.StatusForbidden, errs.PermissionDenied)
	sec.call(owner, ta+"create", withGroup("WORKSPACE", wsB)).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(member, ta+"create", withGroup("WORKSPACE", "")).Fails(http.StatusForbidden, errs.PermissionDenied)
	for _, op := range []string{"delete", "sync"} {
		sec.call(owner, ta+op, map[string]any{"trusted_account_id": domainWide["trusted_account_id"]}).Fails(http.StatusForbidden, errs.PermissionDenied)
		sec.call(owner, ta+op, map[string]any{"trusted_account_id": inB["trusted_account_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
		sec.call(member, ta+op, map[string]any{"trusted_account_id": inA["trusted_account_id"]}).Fails(http.StatusForbidden, errs.PermissionDenied)
	}
	sec.call(owner, ta+"update", map[string]any{"trusted_account_id": domainWide["trusted_account_id"], "tags": map[string]any{}}).Fails(http.StatusForbidden, errs.PermissionDenied)
	sec.call(owner, ta+"update-secret-data", map[string]any{"trusted_account_id": inB["trusted_account_id"], "secret_schema_id": "azure-secret-client-secret", "secret_data": map[string]any{"subscription_id": "sub-0001", "tenant_id": "tenant-0001", "client_id": "client-0001", "client_secret": "cs-01"}}).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(owner, ta+"get", map[string]any{"trusted_account_id": inB["trusted_account_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(member, ta+"get", map[string]any{"trusted_account_id": inB["trusted_account_id"]}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	// Reads: the workspace's records and the domain-wide ones.
	for _, c := range []*testkit.Client{owner, member} {
		sec.call(c, ta+"get", map[string]any{"trusted_account_id": domainWide["trusted_account_id"]}).OK(nil)
		sec.call(c, ta+"get", map[string]any{"trusted_account_id": inA["trusted_account_id"]}).OK(nil)
		if n := identitytest.ListCount(t, c, ta+"list", nil); n != 2 {
			t.Fatalf("workspace caller lists %d", n)
		}
		if n := identitytest.ListCount(t, c, ta+"list", map[string]any{"workspace_id": wsB}); n != 0 {
			t.Fatalf("workspace caller lists %d of another workspace", n)
		}
		if n := identitytest.StatCount(c, ta+"stat", nil); n != 2 {
			t.Fatalf("workspace caller counts %d", n)
		}
	}
	if n := identitytest.ListCount(t, h.Admin, ta+"list", nil); n != 4 {
		t.Fatalf("admin lists %d", n)
	}
	// The owner changes, syncs and deletes its workspace's record.
	var got map[string]any
	sec.call(owner, ta+"update", map[string]any{"trusted_account_id": inA["trusted_account_id"], "tags": map[string]any{"a": "b"}}).OK(&got)
	sec.call(owner, ta+"sync", map[string]any{"trusted_account_id": inA["trusted_account_id"]}).OK(&got)
	if got["workspace_id"] != wsA || got["status"] != "IN_PROGRESS" {
		t.Fatalf("owner sync = %v", got)
	}
	sec.call(owner, ta+"delete", map[string]any{"trusted_account_id": inA["trusted_account_id"]}).OK(nil)
}

func TestTrustedServiceAccount(t *testing.T) {
	h := newHarness(t)
	const tsa = "/identity/v2/trusted-service-account/"
	wsA, owner, member := h.WorkspaceUsers("alpha")
	otherID, other := h.NewDomain("other")

	var a map[string]any
	h.Admin.Call(tsa+"create", map[string]any{"name": "org root", "data": map[string]any{"org": "o-1"}, "provider": "aws", "scope": "DOMAIN",
		"domain_id": h.Domain, "tags": map[string]any{"k": "v"}}).OK(&a)
	identitytest.SameFields(t, "tsa create", a, tsaFields...)
	id := a["trusted_service_account_id"].(string)
	if !tsaIDPattern.MatchString(id) || a["scope"] != "DOMAIN" || a["workspace_id"] != "*" || a["domain_id"] != h.Domain || !identitytest.IsoMillis.MatchString(a["created_at"].(string)) {
		t.Fatalf("tsa create = %v", a)
	}
	var w map[string]any
	owner.Call(tsa+"create", map[string]any{"name": "team", "data": map[string]any{}, "provider": "aws", "scope": "WORKSPACE", "domain_id": h.Domain}).OK(&w)
	if w["workspace_id"] != wsA {
		t.Fatalf("owner's tsa = %v", w)
	}

	frozen := h.DBFrozen(core.TrustedSACollection)
	h.Admin.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN", "domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN"}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "PROJECT", "domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Admin.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "WORKSPACE", "domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	owner.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN", "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	member.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "WORKSPACE", "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call(tsa+"get", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain, "workspace_id": wsA}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call(tsa+"get", map[string]any{"trusted_service_account_id": id, "domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call(tsa+"update", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain, "workspace_id": wsA}).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.Admin.Call(tsa+"update", map[string]any{"trusted_service_account_id": w["trusted_service_account_id"], "domain_id": h.Domain, "workspace_id": "workspace-000000000000"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	owner.Call(tsa+"update", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain, "name": "mine"}).Fails(http.StatusForbidden, errs.PermissionDenied)
	owner.Call(tsa+"delete", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain}).Fails(http.StatusForbidden, errs.PermissionDenied)
	h.Admin.Call(tsa+"list", nil).Fails(http.StatusBadRequest, errs.RequiredParameter)
	h.Admin.Call(tsa+"list", map[string]any{"domain_id": otherID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.Admin.Call(tsa+"stat", map[string]any{"domain_id": otherID, "query": identitytest.CountQuery}).Fails(http.StatusNotFound, errs.NotFoundCode)
	frozen()

	var got map[string]any
	member.Call(tsa+"get", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain}).OK(&got)
	identitytest.SameFields(t, "tsa get", got, tsaFields...)
	h.Admin.Call(tsa+"get", map[string]any{"trusted_service_account_id": w["trusted_service_account_id"], "domain_id": h.Domain, "workspace_id": wsA}).OK(nil)
	if n := identitytest.ListCount(t, h.Admin, tsa+"list", map[string]any{"domain_id": h.Domain}); n != 2 {
		t.Fatalf("tsa list = %d", n)
	}
	if n := identitytest.ListCount(t, h.Admin, tsa+"list", map[string]any{"domain_id": h.Domain, "scope": "WORKSPACE"}); n != 1 {
		t.Fatalf("tsa list by scope = %d", n)
	}
	if n := identitytest.ListCount(t, member, tsa+"list", map[string]any{"domain_id": h.Domain}); n != 2 {
		t.Fatalf("member tsa list = %d", n)
	}
	if n := identitytest.StatCount(h.Admin, tsa+"stat", map[string]any{"domain_id": h.Domain, "workspace_id": wsA}); n != 1 {
		t.Fatalf("tsa stat in workspace = %d", n)
	}
	if n := identitytest.StatCount(h.Admin, tsa+"stat", map[string]any{"domain_id": h.Domain}); n != 2 {
		t.Fatalf("tsa stat = %d", n)
	}
	h.Admin.Call(tsa+"update", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain, "name": "org", "data": map[string]any{"org": "o-2"}, "tags": map[string]any{}}).OK(&got)
	identitytest.SameFields(t, "tsa update", got, tsaFields...)
	if got["name"] != "org" || got["data"].(map[string]any)["org"] != "o-2" || len(got["tags"].(map[string]any)) != 0 || got["provider"] != "aws" {
		t.Fatalf("tsa update = %v", got)
	}
	// An admin moves a workspace record to another workspace of the domain.
	var ws2 map[string]any
	h.Admin.Call("/identity/v2/workspace/create", map[string]any{"name": "gamma"}).OK(&ws2)
	h.Admin.Call(tsa+"update", map[string]any{"trusted_service_account_id": w["trusted_service_account_id"], "domain_id": h.Domain, "workspace_id": ws2["workspace_id"]}).OK(&got)
	if got["workspace_id"] != ws2["workspace_id"] {
		t.Fatalf("moved tsa = %v", got)
	}
	owner.Call(tsa+"get", map[string]any{"trusted_service_account_id": w["trusted_service_account_id"], "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// SYSTEM may name any domain.
	var sys map[string]any
	h.System.Call(tsa+"create", map[string]any{"name": "b", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN", "domain_id": otherID}).OK(&sys)
	if sys["domain_id"] != otherID {
		t.Fatalf("SYSTEM tsa = %v", sys)
	}
	if n := identitytest.ListCount(t, other, tsa+"list", map[string]any{"domain_id": otherID}); n != 1 {
		t.Fatalf("other lists %d", n)
	}
	h.Admin.Call(tsa+"delete", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain}).OK(nil)
	h.Admin.Call(tsa+"get", map[string]any{"trusted_service_account_id": id, "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// The spec's path for them is the trusted account's; Nubes serves them
	// under their own prefix, and the trusted-account paths stay trusted
	// accounts.
	h.Admin.Call("/identity/v2/trusted-account/get", map[string]any{"trusted_service_account_id": w["trusted_service_account_id"], "domain_id": h.Domain}).Fails(http.StatusBadRequest, errs.InvalidParameter)
}

// An admin of domain B never reads, lists, counts, changes or deletes
// domain A's trusted accounts or trusted service accounts.
func TestTrustedIsolation(t *testing.T) {
	h := newHarness(t)
	sec := &secrets{t: t}
	const ta, tsa = "/identity/v2/trusted-account/", "/identity/v2/trusted-service-account/"
	otherID, other := h.NewDomain("other")
	secret := sec.add("domain-a-secret-value")
	var a, s map[string]any
	sec.call(h.Admin, ta+"create", map[string]any{"name": "A", "data": map[string]any{"account_id": "1"}, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIAA", "aws_secret_access_key": secret}, "resource_group": "DOMAIN"}).OK(&a)
	h.Admin.Call(tsa+"create", map[string]any{"name": "A", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN", "domain_id": h.Domain}).OK(&s)
	sec.call(other, ta+"create", map[string]any{"name": "B", "data": map[string]any{"account_id": "2"}, "provider": "aws", "secret_schema_id": "aws-secret-access-key",
		"secret_data": map[string]any{"aws_access_key_id": "AKIAB", "aws_secret_access_key": "bbbb"}, "resource_group": "DOMAIN"}).OK(nil)
	other.Call(tsa+"create", map[string]any{"name": "B", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN", "domain_id": otherID}).OK(nil)

	frozen := h.DBFrozen(core.TrustedAccountsCollection, core.TrustedSecretsCollection, core.TrustedSACollection, core.JobsCollection)
	taID := a["trusted_account_id"]
	for _, op := range []string{"get", "delete", "sync"} {
		sec.call(other, ta+op, map[string]any{"trusted_account_id": taID}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	sec.call(other, ta+"update", map[string]any{"trusted_account_id": taID, "tags": map[string]any{"x": 1}}).Fails(http.StatusNotFound, errs.NotFoundCode)
	sec.call(other, ta+"update-secret-data", map[string]any{"trusted_account_id": taID, "secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAS", "aws_secret_access_key": "stolen"}}).Fails(http.StatusNotFound, errs.NotFoundCode)
	for _, body := range []map[string]any{
		nil, {"trusted_account_id": taID}, {"trusted_secret_id": a["trusted_secret_id"]},
		{"query": map[string]any{"filter_or": []any{map[string]any{"k": "domain_id", "v": h.Domain, "o": "eq"}, map[string]any{"k": "name", "v": "A", "o": "eq"}}}},
	} {
		var b any = body
		if body == nil {
			b = nil
		}
		var l struct {
			Results []map[string]any `json:"results"`
		}
		sec.call(other, ta+"list", b).OK(&l)
		for _, r := range l.Results {
			if r["domain_id"] != otherID {
				t.Fatalf("domain B lists %v", r)
			}
		}
	}
	if n := identitytest.StatCount(other, ta+"stat", nil); n != 1 {
		t.Fatalf("domain B counts %d trusted accounts", n)
	}
	sID := s["trusted_service_account_id"]
	for _, d := range []string{h.Domain, otherID} {
		for _, op := range []string{"get", "delete"} {
			other.Call(tsa+op, map[string]any{"trusted_service_account_id": sID, "domain_id": d}).Fails(http.StatusNotFound, errs.NotFoundCode)
		}
		other.Call(tsa+"update", map[string]any{"trusted_service_account_id": sID, "domain_id": d, "name": "mine"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	other.Call(tsa+"list", map[string]any{"domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call(tsa+"stat", map[string]any{"domain_id": h.Domain, "query": identitytest.CountQuery}).Fails(http.StatusNotFound, errs.NotFoundCode)
	other.Call(tsa+"create", map[string]any{"name": "x", "data": map[string]any{}, "provider": "aws", "scope": "DOMAIN", "domain_id": h.Domain}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := identitytest.ListCount(t, other, tsa+"list", map[string]any{"domain_id": otherID, "trusted_service_account_id": sID}); n != 0 {
		t.Fatalf("domain B lists domain A's tsa")
	}
	if n := identitytest.StatCount(other, tsa+"stat", map[string]any{"domain_id": otherID}); n != 1 {
		t.Fatalf("domain B counts %d tsa", n)
	}
	frozen()
}

// newHarness mounts the trusted accounts', the trusted service accounts'
// and the workspaces' operations (trusted records live in workspaces) and
// runs the sync workers.
func newHarness(t *testing.T) *identitytest.Harness {
	return identitytest.New(t, identitytest.Mount(trustedaccount.Routes, trustedserviceaccount.Routes, workspace.Routes), identitytest.Options{Workers: trustedaccount.Workers})
}
