package strictjson

import (
	"reflect"
	"testing"
)

// TestCanonicalBytes pins the rewrite byte for byte: struct members under
// their json names in the order sent, nulls dropped, map keys kept but
// written as encoding/json writes a string (escapes resolved, <>& and
// non-ASCII as it escapes them), values copied as sent.
func TestCanonicalBytes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{}`, `{}`},
		{` {"workspaceId" : "w", "name":null, "countMax": 3 } `, `{"workspace_id":"w","count_max":3}`},
		{`{"leafList": [ {"userId": "a"} , {"user_id":"b"}], "leafInfo": {"userId": null}}`,
			`{"leaf_list":[{"user_id":"a"},{"user_id":"b"}],"leaf_info":{}}`},
		{`{"byKey": {"a\u0041": {"userId": "u"}, "<&>": {}, "é\n": {"user_id": "x"}}}`,
			`{"by_key":{"aA":{"user_id":"u"},"\u003c\u0026\u003e":{},"é\n":{"user_id":"x"}}}`},
		{`{"tags": {"k\"": [1, {"a_b": null}], "x": "y\u0041"}, "dataValue": {"aB": 1}}`,
			`{"tags":{"k\"": [1, {"a_b": null}], "x": "y\u0041"},"data_value":{"aB": 1}}`},
		{`{"rawRows": [], "nested": {"domainId": "d"}}`, `{"raw_rows":[],"nested":{"domain_id":"d"}}`},
	} {
		got, err := canonical([]byte(c.in), reflect.TypeFor[target](), "")
		if err != nil {
			t.Fatalf("canonical(%s): %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("canonical(%s) =\n%s, want\n%s", c.in, got, c.want)
		}
	}
}
