package testkit

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Oracle describes one secret field for SecretOracle: the list (and stat,
// when the resource has one) of its resource, how a request body wraps a
// query, the stored path of the secret and two values to guess, one of
// them right.
type Oracle struct {
	List, Stat string
	// Body wraps a query into a request body (nil: {"query": q}).
	Body func(q map[string]any) map[string]any
	// Secret is the stored path; Probe is a path to try besides it (one
	// under it, such as registry_config.password), "" for none.
	Secret, Probe string
	Right, Wrong  string
}

// SecretOracle asserts that no query answers anything about a secret
// field: every slot that names a path (filter, filter_or, sort, only, and
// stat's distinct, group keys and fields), with the right value and with a
// wrong one, is refused with 400 ERROR_INVALID_PARAMETER naming the path,
// and the two answers are byte for byte the same and never carry the
// right value. c is a caller who can list the resource and sees the
// record holding the secret.
func SecretOracle(t *testing.T, c *Client, o Oracle) {
	t.Helper()
	wrap := o.Body
	if wrap == nil {
		wrap = func(q map[string]any) map[string]any { return map[string]any{"query": q} }
	}
	paths := []string{o.Secret}
	if o.Probe != "" {
		paths = append(paths, o.Probe)
	}
	if i := strings.LastIndex(o.Secret, "."); i > 0 {
		paths = append(paths, o.Secret[:i]) // a parent compares the secret as part of a document
	}
	type probe struct {
		name string
		path string
		list bool
		q    func(v string) map[string]any
	}
	var probes []probe
	for _, p := range paths {
		cond := func(op string) func(v string) map[string]any {
			return func(v string) map[string]any {
				return map[string]any{"filter": []any{map[string]any{"k": p, "v": v, "o": op}}, "count_only": true}
			}
		}
		probes = append(probes,
			probe{"filter regex", p, true, cond("regex")},
			probe{"filter eq", p, true, cond("eq")},
			probe{"filter contain", p, true, cond("contain")},
			probe{"filter_or", p, true, func(v string) map[string]any {
				return map[string]any{"filter_or": []any{map[string]any{"k": p, "v": "^" + v, "o": "regex"}}}
			}},
			probe{"sort", p, true, func(string) map[string]any { return map[string]any{"sort": []any{map[string]any{"key": p}}} }},
			probe{"only", p, true, func(string) map[string]any { return map[string]any{"only": []any{p}} }},
		)
		if o.Stat != "" {
			probes = append(probes,
				probe{"stat filter", p, false, func(v string) map[string]any {
					return map[string]any{"filter": []any{map[string]any{"k": p, "v": v, "o": "eq"}},
						"aggregate": []any{map[string]any{"count": map[string]any{"name": "n"}}}}
				}},
				probe{"stat distinct", p, false, func(string) map[string]any { return map[string]any{"distinct": p} }},
				probe{"stat group key", p, false, func(string) map[string]any {
					return map[string]any{"aggregate": []any{map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": p, "name": "k"}}}}}}
				}},
				probe{"stat group field", p, false, func(string) map[string]any {
					return map[string]any{"aggregate": []any{map[string]any{"group": map[string]any{"fields": []any{map[string]any{"key": p, "name": "f", "operator": "add_to_set"}}}}}}
				}},
			)
		}
	}
	for _, pr := range probes {
		path := o.List
		if !pr.list {
			path = o.Stat
		}
		right := c.Call(path, wrap(pr.q(o.Right)))
		wrong := c.Call(path, wrap(pr.q(o.Wrong)))
		if right.Status != http.StatusBadRequest || !bytes.Equal(right.Body, wrong.Body) || right.Status != wrong.Status {
			t.Errorf("%s %s on %s: answers %d %s and %d %s, want the same 400 whatever the value",
				path, pr.name, pr.path, right.Status, right.Body, wrong.Status, wrong.Body)
			continue
		}
		var body struct {
			Detail struct{ Code, Message string } `json:"detail"`
		}
		_ = json.Unmarshal(right.Body, &body)
		if body.Detail.Code != errs.InvalidParameter || !strings.Contains(body.Detail.Message, pr.path) {
			t.Errorf("%s %s on %s: %s, want %s naming the path", path, pr.name, pr.path, right.Body, errs.InvalidParameter)
		}
		if o.Right != "" && bytes.Contains(right.Body, []byte(o.Right)) {
			t.Errorf("%s %s on %s: the answer carries the secret: %s", path, pr.name, pr.path, right.Body)
		}
	}
}
