package repository_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/services/repository"
)

// TestBadInputOnEveryOperation: each operation refuses malformed JSON, a
// body that is not an object, an unknown member, a key of the wrong type,
// a missing key and an oversized body, storing nothing.
func TestBadInputOnEveryOperation(t *testing.T) {
	t.Parallel()
	h := setup(t, repository.Config{})
	h.register(t, h.adminA, ec2)
	ops := []struct {
		path string
		key  string // a required string member
	}{
		{"/repository/v1/plugin/register", "name"},
		{"/repository/v1/plugin/update", "plugin_id"},
		{"/repository/v1/plugin/deregister", "plugin_id"},
		{"/repository/v1/plugin/enable", "plugin_id"},
		{"/repository/v1/plugin/disable", "plugin_id"},
		{"/repository/v1/plugin/get-versions", "plugin_id"},
		{"/repository/v1/plugin/get", "plugin_id"},
		{"/repository/v1/plugin/list", ""},
		{"/repository/v1/policy/create", "policy_id"},
		{"/repository/v1/policy/update", "policy_id"},
		{"/repository/v1/policy/delete", "policy_id"},
		{"/repository/v1/policy/get", "policy_id"},
		{"/repository/v1/policy/list", "repository_id"},
		{"/repository/v1/policy/stat", "repository_id"},
		{"/repository/v1/schema/create", "name"},
		{"/repository/v1/schema/update", "name"},
		{"/repository/v1/schema/delete", "name"},
		{"/repository/v1/schema/get", "name"},
		{"/repository/v1/schema/list", "project_id"},
		{"/repository/v1/schema/stat", "repository_id"},
		{"/repository/v1/repository/list", ""},
		{"/repository/v1/repository/get", "repository_id"},
	}
	colls := []string{repository.PluginsCollection, repository.PoliciesCollection, repository.SchemasCollection, repository.RepositoriesCollection}
	snap := func() [][]any {
		var out [][]any
		for _, c := range colls {
			var docs []any
			for _, d := range h.snapshot(t, c) {
				docs = append(docs, d)
			}
			out = append(out, docs)
		}
		return out
	}
	before := snap()
	huge := `{"name": "` + strings.Repeat("x", 1<<20) + `"}`
	for _, op := range ops {
		cases := []struct {
			name   string
			body   string
			status int
			code   string
		}{
			{"malformed", `{"plugin_id": `, 400, errs.JSONFormat},
			{"not an object", `["x"]`, 400, errs.JSONFormat},
			{"unknown member", `{"colour": "red"}`, 400, errs.InvalidParameter},
			{"oversized", huge, 413, errs.RequestTooLarge},
		}
		if op.key != "" {
			cases = append(cases,
				struct {
					name   string
					body   string
					status int
					code   string
				}{"wrong type", `{"` + op.key + `": 12}`, 400, errs.InvalidParameterType},
				struct {
					name   string
					body   string
					status int
					code   string
				}{"missing", `{}`, 400, errs.RequiredParameter})
		}
		for _, tc := range cases {
			t.Run(op.path+" "+tc.name, func(t *testing.T) {
				h.system.Call(op.path, tc.body).Fails(tc.status, tc.code)
			})
		}
	}
	if after := snap(); !reflect.DeepEqual(after, before) {
		t.Fatal("bad input changed the store")
	}
	h.adminA.Call("/repository/v1/plugin/list", `{"query": {"filter": [{"k": "$where", "v": "1", "o": "eq"}]}}`).Fails(http.StatusBadRequest, errs.DBQuery)
	h.adminA.Call("/repository/v1/plugin/list", `{"query": {"filter": [{"k": "name", "v": "x", "o": "like"}]}}`).Fails(http.StatusBadRequest, errs.DBQuery)
	h.adminA.Call("/repository/v1/repository/list", `{"query": {"filter": []}}`).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.adminA.Call("/repository/v1/repository/list", `{"repository_type": "managed"}`).Fails(http.StatusBadRequest, errs.InvalidParameter)
	h.adminA.Call("/repository/v1/plugin/publish", `{}`).Fails(http.StatusNotFound, errs.UnsupportedAPI)
}
