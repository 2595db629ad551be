package repository_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/repository"
)

func TestPolicyLifecycle(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	perms := []string{"inventory.*", "*", "inventory.*", "identity.Project.read"}
	var p policyInfo
	h.adminA.Call("/repository/v1/policy/create", map[string]any{"policy_id": "ops-read-1", "name": "Ops", "permissions": perms,
		"domain_id": "domain-a", "labels": []any{"ops"}, "tags": map[string]any{"team": "ops"}}).OK(&p)
	if p.PolicyID != "ops-read-1" || p.State != "ENABLED" || !reflect.DeepEqual(p.Permissions, perms) || p.DomainID != "domain-a" ||
		p.ProjectID != "*" || p.RepositoryInfo != (repoInfo{h.local, "local", "local"}) || p.CreatedAt != p.UpdatedAt {
		t.Fatalf("created: %+v", p)
	}
	var got policyInfo
	h.userA.Call("/repository/policy/get", map[string]any{"policy_id": "ops-read-1", "domain_id": "domain-a"}).OK(&got)
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("get = %+v", got)
	}
	only := h.userA.Call("/repository/policy/get", map[string]any{"policy_id": "ops-read-1", "domain_id": "domain-a", "repository_id": h.local,
		"only": []string{"policy_id", "permissions"}}).JSON()
	if len(only) != 2 || only["policy_id"] != "ops-read-1" {
		t.Fatalf("get with only = %v", only)
	}
	h.adminA.Call("/repository/v1/policy/update", map[string]any{"policy_id": "ops-read-1", "domain_id": "domain-a", "name": "Ops 2",
		"permissions": []string{"b.*", "a.*"}}).OK(&got)
	if got.Name != "Ops 2" || !reflect.DeepEqual(got.Permissions, []string{"b.*", "a.*"}) || got.PolicyID != "ops-read-1" || got.Tags["team"] != "ops" {
		t.Fatalf("update = %+v", got)
	}
	h.adminA.Call("/repository/v1/policy/create", map[string]any{"policy_id": "dev", "name": "Dev", "permissions": []string{"x"}, "domain_id": "domain-a", "project_id": "project-1"}).OK(nil)
	var l list[policyInfo]
	h.memberA.Call("/repository/policy/list", map[string]any{"repository_id": h.local, "domain_id": "domain-a"}).OK(&l)
	if l.TotalCount != 2 || l.Results[0].PolicyID != "dev" || l.Results[1].PolicyID != "ops-read-1" {
		t.Fatalf("list = %+v", l)
	}
	h.memberA.Call("/repository/policy/list", map[string]any{"repository_id": h.local, "domain_id": "domain-a", "project_id": "project-1", "state": "ENABLED"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].PolicyID != "dev" {
		t.Fatalf("list by project = %+v", l)
	}
	st := h.adminA.Call("/repository/policy/stat", map[string]any{"repository_id": h.local, "domain_id": "domain-a",
		"query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).JSON()
	if rows := st["results"].([]any); len(rows) != 1 || rows[0].(map[string]any)["n"] != float64(2) {
		t.Fatalf("stat = %v", st)
	}
	h.adminA.Call("/repository/v1/policy/delete", map[string]any{"policy_id": "dev", "domain_id": "domain-a"}).OK(nil)
	h.adminA.Call("/repository/v1/policy/get", map[string]any{"policy_id": "dev", "domain_id": "domain-a"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminA.Call("/repository/v1/policy/delete", map[string]any{"policy_id": "dev", "domain_id": "domain-a"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	// SYSTEM may act in any domain.
	h.system.Call("/repository/v1/policy/create", map[string]any{"policy_id": "dev", "name": "By system", "permissions": []string{"x"}, "domain_id": "domain-b"}).OK(&got)
	if got.DomainID != "domain-b" {
		t.Fatalf("system create = %+v", got)
	}
}

func TestPolicyRules(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	create := func(over map[string]any) map[string]any {
		return merge(map[string]any{"policy_id": "p-1", "name": "P", "permissions": []string{"*"}, "domain_id": "domain-a"}, over)
	}
	h.adminA.Call("/repository/v1/policy/create", create(nil)).OK(nil)
	// The same policy_id in another domain is another policy.
	h.adminB.Call("/repository/v1/policy/create", create(map[string]any{"domain_id": "domain-b", "name": "B's"})).OK(nil)
	before := h.snapshot(t, repository.PoliciesCollection)
	cases := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"duplicate policy_id in the domain", h.adminA, "/repository/v1/policy/create", create(map[string]any{"name": "again"}), 409, errs.NotUnique},
		{"uppercase policy_id", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "Ops"}), 400, errs.InvalidParameter},
		{"underscore in policy_id", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "ops_read"}), 400, errs.InvalidParameter},
		{"policy_id over 48", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": strings.Repeat("p", 49)}), 400, errs.InvalidParameter},
		{"no policy_id", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": nil}), 400, errs.RequiredParameter},
		{"no permissions", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "permissions": nil}), 400, errs.RequiredParameter},
		{"empty permission", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "permissions": []string{"a", " "}}), 400, errs.InvalidParameter},
		{"permissions not strings", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "permissions": []any{1}}), 400, errs.InvalidParameterType},
		{"no name", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "name": nil}), 400, errs.RequiredParameter},
		{"no domain_id", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "domain_id": nil}), 400, errs.RequiredParameter},
		{"another domain", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "domain_id": "domain-b"}), 404, errs.NotFoundCode},
		{"bad tags key", h.adminA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2", "tags": map[string]any{"": 1}}), 400, errs.InvalidParameter},
		{"member cannot create", h.memberA, "/repository/v1/policy/create", create(map[string]any{"policy_id": "p-2"}), 403, errs.PermissionDenied},
		{"user cannot delete", h.userA, "/repository/v1/policy/delete", map[string]any{"policy_id": "p-1", "domain_id": "domain-a"}, 403, errs.PermissionDenied},
		{"policy_id never changes", h.adminA, "/repository/v1/policy/update", map[string]any{"policy_id": "p-1", "domain_id": "domain-a", "new_policy_id": "p-9"}, 400, errs.InvalidParameter},
		{"update an unknown policy", h.adminA, "/repository/v1/policy/update", map[string]any{"policy_id": "p-9", "domain_id": "domain-a", "name": "x"}, 404, errs.NotFoundCode},
		{"update with an empty permission", h.adminA, "/repository/v1/policy/update", map[string]any{"policy_id": "p-1", "domain_id": "domain-a", "permissions": []string{""}}, 400, errs.InvalidParameter},
		{"update without domain_id", h.adminA, "/repository/v1/policy/update", map[string]any{"policy_id": "p-1", "name": "x"}, 400, errs.RequiredParameter},
		{"delete without policy_id", h.adminA, "/repository/v1/policy/delete", map[string]any{"domain_id": "domain-a"}, 400, errs.RequiredParameter},
		{"get with a bad only", h.adminA, "/repository/v1/policy/get", map[string]any{"policy_id": "p-1", "domain_id": "domain-a", "only": []string{"secret"}}, 400, errs.InvalidParameter},
		{"list needs repository_id", h.adminA, "/repository/v1/policy/list", map[string]any{"domain_id": "domain-a"}, 400, errs.RequiredParameter},
		{"list needs domain_id", h.adminA, "/repository/v1/policy/list", map[string]any{"repository_id": h.local}, 400, errs.RequiredParameter},
		{"list of an unknown repository", h.adminA, "/repository/v1/policy/list", map[string]any{"repository_id": "repo-000000000000", "domain_id": "domain-a"}, 404, errs.NotFoundCode},
		{"stat needs repository_id", h.adminA, "/repository/v1/policy/stat", map[string]any{"domain_id": "domain-a", "query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}, 400, errs.RequiredParameter},
		{"stat needs query", h.adminA, "/repository/v1/policy/stat", map[string]any{"domain_id": "domain-a", "repository_id": h.local}, 400, errs.RequiredParameter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.as.Call(tc.path, tc.body).Fails(tc.status, tc.code)
			if after := h.snapshot(t, repository.PoliciesCollection); !reflect.DeepEqual(after, before) {
				t.Fatal("a refused call changed the store")
			}
		})
	}
}

func TestPolicyAndSchemaDomainIsolation(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	h.adminA.Call("/repository/v1/policy/create", map[string]any{"policy_id": "secret-of-a", "name": "A", "permissions": []string{"*"}, "domain_id": "domain-a"}).OK(nil)
	h.adminA.Call("/repository/v1/schema/create", map[string]any{"name": "form-of-a", "service_type": "secret.credentials", "schema_id": "s-a",
		"schema": map[string]any{"type": "object"}, "domain_id": "domain-a"}).OK(nil)
	h.adminB.Call("/repository/v1/policy/create", map[string]any{"policy_id": "of-b", "name": "B", "permissions": []string{"*"}, "domain_id": "domain-b"}).OK(nil)
	policies, schemas := h.snapshot(t, repository.PoliciesCollection), h.snapshot(t, repository.SchemasCollection)
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		// B naming A's domain, and B naming its own: A's records are not there.
		{"/repository/v1/policy/get", map[string]any{"policy_id": "secret-of-a", "domain_id": "domain-a"}},
		{"/repository/v1/policy/get", map[string]any{"policy_id": "secret-of-a", "domain_id": "domain-b"}},
		{"/repository/v1/policy/update", map[string]any{"policy_id": "secret-of-a", "domain_id": "domain-a", "name": "taken"}},
		{"/repository/v1/policy/update", map[string]any{"policy_id": "secret-of-a", "domain_id": "domain-b", "name": "taken"}},
		{"/repository/v1/policy/delete", map[string]any{"policy_id": "secret-of-a", "domain_id": "domain-a"}},
		{"/repository/v1/policy/delete", map[string]any{"policy_id": "secret-of-a", "domain_id": "domain-b"}},
		{"/repository/v1/policy/list", map[string]any{"repository_id": h.local, "domain_id": "domain-a"}},
		{"/repository/v1/schema/get", map[string]any{"name": "form-of-a", "domain_id": "domain-a"}},
		{"/repository/v1/schema/get", map[string]any{"name": "form-of-a", "domain_id": "domain-b"}},
		{"/repository/v1/schema/update", map[string]any{"name": "form-of-a", "domain_id": "domain-b", "tags": map[string]any{"x": 1}}},
		{"/repository/v1/schema/delete", map[string]any{"name": "form-of-a", "domain_id": "domain-a"}},
		{"/repository/v1/schema/delete", map[string]any{"name": "form-of-a", "domain_id": "domain-b"}},
		{"/repository/v1/schema/list", map[string]any{"repository_id": h.local, "domain_id": "domain-a", "project_id": "*"}},
	} {
		h.adminB.Call(tc.path, tc.body).Fails(http.StatusNotFound, errs.NotFoundCode)
	}
	if !reflect.DeepEqual(h.snapshot(t, repository.PoliciesCollection), policies) || !reflect.DeepEqual(h.snapshot(t, repository.SchemasCollection), schemas) {
		t.Fatal("domain B changed domain A's records")
	}
	var pl list[policyInfo]
	for _, body := range []map[string]any{
		{"repository_id": h.local, "domain_id": "domain-b"},
		{"repository_id": h.local, "domain_id": "domain-b", "query": map[string]any{"filter": []any{map[string]any{"k": "domain_id", "v": "domain-a", "o": "eq"}}}},
		{"repository_id": h.local, "domain_id": "domain-b", "query": map[string]any{"filter_or": []any{map[string]any{"k": "domain_id", "v": "domain-a", "o": "eq"}, map[string]any{"k": "name", "v": "A", "o": "eq"}}}},
	} {
		h.adminB.Call("/repository/v1/policy/list", body).OK(&pl)
		for _, r := range pl.Results {
			if r.DomainID != "domain-b" {
				t.Fatalf("list %v leaked %+v", body, r)
			}
		}
	}
	st := h.adminB.Call("/repository/v1/policy/stat", map[string]any{"repository_id": h.local, "domain_id": "domain-b", "query": map[string]any{
		"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "domain_id", "name": "d"}}, "fields": []any{map[string]any{"name": "n", "operator": "count"}}}}}}}).JSON()
	if rows := st["results"].([]any); len(rows) != 1 || rows[0].(map[string]any)["d"] != "domain-b" {
		t.Fatalf("stat crossed domains: %v", st)
	}
	var sl list[schemaInfo]
	h.adminB.Call("/repository/v1/schema/list", map[string]any{"repository_id": h.local, "domain_id": "domain-b", "project_id": "*"}).OK(&sl)
	if sl.TotalCount != 0 {
		t.Fatalf("B's schemas = %+v", sl)
	}
	st = h.adminB.Call("/repository/v1/schema/stat", map[string]any{"repository_id": h.local, "domain_id": "domain-b", "query": map[string]any{
		"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}).JSON()
	if rows := st["results"].([]any); len(rows) != 0 && rows[0].(map[string]any)["n"] != float64(0) {
		t.Fatalf("schema stat crossed domains: %v", st)
	}
}

// credentialForm is a JSON Schema with the keys MongoDB would refuse.
var credentialForm = map[string]any{
	"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": []any{"access_key"},
	"$defs":      map[string]any{"key": map[string]any{"type": "string", "minLength": 4.0}},
	"properties": map[string]any{"access_key": map[string]any{"$ref": "#/$defs/key"}, "region.name": map[string]any{"type": "string"}},
}

func TestSchemaLifecycle(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	var s schemaInfo
	h.adminA.Call("/repository/v1/schema/create", map[string]any{"name": "aws_access_key", "service_type": "secret.credentials", "schema_id": "aws-ak",
		"schema": credentialForm, "domain_id": "domain-a", "labels": []any{"aws"}}).OK(&s)
	if s.Name != "aws_access_key" || s.SchemaID != "aws-ak" || !reflect.DeepEqual(s.Schema, credentialForm) || s.ProjectID != "*" ||
		s.DomainID != "domain-a" || s.RepositoryInfo != (repoInfo{h.local, "local", "local"}) {
		t.Fatalf("created: %+v", s)
	}
	var got schemaInfo
	h.userA.Call("/repository/schema/get", map[string]any{"name": "aws_access_key", "domain_id": "domain-a", "schema_id": "aws-ak", "repository_id": h.local}).OK(&got)
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("get = %+v", got)
	}
	h.userA.Call("/repository/schema/get", map[string]any{"name": "aws_access_key", "domain_id": "domain-a", "schema_id": "other"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	only := h.userA.Call("/repository/schema/get", map[string]any{"name": "aws_access_key", "domain_id": "domain-a", "only": []string{"schema"}}).JSON()
	if len(only) != 1 || only["schema"] == nil {
		t.Fatalf("only = %v", only)
	}
	newForm := map[string]any{"type": "object", "properties": map[string]any{"token": map[string]any{"type": "string"}}}
	h.adminA.Call("/repository/v1/schema/update", map[string]any{"name": "aws_access_key", "domain_id": "domain-a", "schema": newForm, "tags": map[string]any{"v": "2"}}).OK(&got)
	if !reflect.DeepEqual(got.Schema, newForm) || got.Tags["v"] != "2" || got.SchemaID != "aws-ak" || len(got.Labels) != 1 {
		t.Fatalf("update = %+v", got)
	}
	// Project scoping of list: a project sees its own and the domain-wide
	// schemas; "*" sees all.
	h.adminA.Call("/repository/v1/schema/create", map[string]any{"name": "p1-form", "service_type": "secret.credentials", "schema_id": "p1",
		"schema": map[string]any{}, "domain_id": "domain-a", "project_id": "project-1"}).OK(nil)
	h.adminA.Call("/repository/v1/schema/create", map[string]any{"name": "p2-form", "service_type": "other", "schema_id": "p2",
		"schema": map[string]any{}, "domain_id": "domain-a", "project_id": "project-2"}).OK(nil)
	var l list[schemaInfo]
	for _, tc := range []struct {
		body map[string]any
		want []string
	}{
		{map[string]any{"project_id": "*"}, []string{"aws_access_key", "p1-form", "p2-form"}},
		{map[string]any{"project_id": "project-1"}, []string{"aws_access_key", "p1-form"}},
		{map[string]any{"project_id": "project-9"}, []string{"aws_access_key"}},
		{map[string]any{"project_id": "*", "service_type": "other"}, []string{"p2-form"}},
		{map[string]any{"project_id": "*", "schema_id": "p1", "state": "ENABLED"}, []string{"p1-form"}},
		{map[string]any{"project_id": "*", "query": map[string]any{"keyword": "AWS"}}, []string{"aws_access_key"}},
	} {
		body := merge(tc.body, map[string]any{"repository_id": h.local, "domain_id": "domain-a"})
		h.memberA.Call("/repository/schema/list", body).OK(&l)
		var names []string
		for _, r := range l.Results {
			names = append(names, r.Name)
		}
		if l.TotalCount != len(tc.want) || !reflect.DeepEqual(names, tc.want) {
			t.Fatalf("list %v = %v, want %v", tc.body, names, tc.want)
		}
	}
	h.adminA.Call("/repository/v1/schema/delete", map[string]any{"name": "p2-form", "domain_id": "domain-a", "schema_id": "wrong"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	h.adminA.Call("/repository/v1/schema/delete", map[string]any{"name": "p2-form", "domain_id": "domain-a", "schema_id": "p2"}).OK(nil)
	h.adminA.Call("/repository/v1/schema/get", map[string]any{"name": "p2-form", "domain_id": "domain-a"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	if n := h.count(t, repository.SchemasCollection); n != 2 {
		t.Fatalf("%d schemas stored, want 2", n)
	}
}

func TestSchemaRules(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	create := func(over map[string]any) map[string]any {
		return merge(map[string]any{"name": "form", "service_type": "secret.credentials", "schema_id": "f", "schema": credentialForm, "domain_id": "domain-a"}, over)
	}
	h.adminA.Call("/repository/v1/schema/create", create(nil)).OK(nil)
	h.adminB.Call("/repository/v1/schema/create", create(map[string]any{"domain_id": "domain-b"})).OK(nil) // same name, another domain
	before := h.snapshot(t, repository.SchemasCollection)
	list := map[string]any{"project_id": "*", "repository_id": h.local, "domain_id": "domain-a"}
	cases := []struct {
		name   string
		as     *testkit.Client
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"duplicate name in the domain", h.adminA, "/repository/v1/schema/create", create(nil), 409, errs.NotUnique},
		{"invalid JSON Schema", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "schema": map[string]any{"type": "strin"}}), 400, errs.InvalidSchema},
		{"schema with a bad keyword value", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "schema": map[string]any{"required": "a"}}), 400, errs.InvalidSchema},
		{"schema that reads a file", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "schema": map[string]any{"$ref": "file:///etc/passwd"}}), 400, errs.InvalidSchema},
		{"schema not an object", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "schema": "object"}), 400, errs.InvalidParameterType},
		{"no schema", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "schema": nil}), 400, errs.RequiredParameter},
		{"no service_type", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "service_type": nil}), 400, errs.RequiredParameter},
		{"no schema_id", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "bad", "schema_id": nil}), 400, errs.RequiredParameter},
		{"no name", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": nil}), 400, errs.RequiredParameter},
		{"another domain", h.adminA, "/repository/v1/schema/create", create(map[string]any{"name": "x", "domain_id": "domain-c"}), 404, errs.NotFoundCode},
		{"member cannot create", h.memberA, "/repository/v1/schema/create", create(map[string]any{"name": "x"}), 403, errs.PermissionDenied},
		{"update to an invalid JSON Schema", h.adminA, "/repository/v1/schema/update", map[string]any{"name": "form", "domain_id": "domain-a", "schema": map[string]any{"minLength": -1}}, 400, errs.InvalidSchema},
		{"update of an unknown schema", h.adminA, "/repository/v1/schema/update", map[string]any{"name": "nope", "domain_id": "domain-a", "tags": map[string]any{}}, 404, errs.NotFoundCode},
		{"update cannot rename", h.adminA, "/repository/v1/schema/update", map[string]any{"name": "form", "domain_id": "domain-a", "schema_id": "g"}, 400, errs.InvalidParameter},
		{"user cannot update", h.userA, "/repository/v1/schema/update", map[string]any{"name": "form", "domain_id": "domain-a", "tags": map[string]any{}}, 403, errs.PermissionDenied},
		{"list needs project_id", h.adminA, "/repository/v1/schema/list", merge(list, map[string]any{"project_id": nil}), 400, errs.RequiredParameter},
		{"list needs repository_id", h.adminA, "/repository/v1/schema/list", merge(list, map[string]any{"repository_id": nil}), 400, errs.RequiredParameter},
		{"list needs domain_id", h.adminA, "/repository/v1/schema/list", merge(list, map[string]any{"domain_id": nil}), 400, errs.RequiredParameter},
		{"list of an unknown repository", h.adminA, "/repository/v1/schema/list", merge(list, map[string]any{"repository_id": "repo-000000000000"}), 404, errs.NotFoundCode},
		{"list with a bad state", h.adminA, "/repository/v1/schema/list", merge(list, map[string]any{"state": "ON"}), 400, errs.InvalidParameter},
		{"stat needs domain_id", h.adminA, "/repository/v1/schema/stat", map[string]any{"repository_id": h.local, "query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}, 400, errs.RequiredParameter},
		{"get with a bad only", h.adminA, "/repository/v1/schema/get", map[string]any{"name": "form", "domain_id": "domain-a", "only": []string{"password"}}, 400, errs.InvalidParameter},
		{"delete without name", h.adminA, "/repository/v1/schema/delete", map[string]any{"domain_id": "domain-a"}, 400, errs.RequiredParameter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.as.Call(tc.path, tc.body).Fails(tc.status, tc.code)
			if after := h.snapshot(t, repository.SchemasCollection); !reflect.DeepEqual(after, before) {
				t.Fatal("a refused call changed the store")
			}
		})
	}
}

func TestPolicyAndSchemaOnlyInTheLocalRepository(t *testing.T) {
	t.Parallel()
	r := setupRemotes(t)
	a := r.a
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/repository/v1/policy/list", map[string]any{"repository_id": r.bID, "domain_id": "domain-a"}},
		{"/repository/v1/policy/get", map[string]any{"repository_id": r.bID, "domain_id": "domain-a", "policy_id": "p"}},
		{"/repository/v1/policy/stat", map[string]any{"repository_id": r.bID, "domain_id": "domain-a", "query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}},
		{"/repository/v1/schema/list", map[string]any{"repository_id": r.bID, "domain_id": "domain-a", "project_id": "*"}},
		{"/repository/v1/schema/get", map[string]any{"repository_id": r.bID, "domain_id": "domain-a", "name": "s"}},
		{"/repository/v1/schema/stat", map[string]any{"repository_id": r.bID, "domain_id": "domain-a", "query": map[string]any{"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}}},
	} {
		a.adminA.Call(tc.path, tc.body).Fails(http.StatusBadRequest, errs.InvalidParameter)
	}
}
