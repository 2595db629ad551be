package jsonschema_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/jsonschema"
)

func obj(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// credentials is a credential form as a repository schema holds one.
const credentials = `{
	"type": "object",
	"required": ["access_key", "region"],
	"properties": {
		"access_key": {"type": "string", "minLength": 4},
		"region": {"enum": ["eu", "us"]},
		"port": {"type": "integer", "maximum": 65535},
		"tags": {"type": "array", "items": {"type": "string"}},
		"nested": {"type": "object", "properties": {"a/b": {"type": "boolean"}}}
	},
	"additionalProperties": false
}`

func TestCompile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type": "string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	valid := []struct {
		name   string
		schema any
	}{
		{"credential form", obj(t, credentials)},
		{"empty object accepts anything", map[string]any{}},
		{"true", true},
		{"draft-07 by $schema", obj(t, `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`)},
		{"draft-04 by $schema", obj(t, `{"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"a": {"type": "string"}}}`)},
		{"local $ref", obj(t, `{"$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s"}}}`)},
		{"Go maps of other types", map[string]any{"properties": map[string]map[string]string{"a": {"type": "string"}}}},
		{"unknown keywords are annotations", obj(t, `{"title": "x", "x-ui": {"order": 1}}`)},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := jsonschema.Compile(tc.schema); err != nil {
				t.Fatalf("Compile: %v", err)
			}
		})
	}
	invalid := []struct {
		name   string
		schema any
		reason string // part of the message
	}{
		{"type not a type", obj(t, `{"type": "strin"}`), "/type"},
		{"type a number", obj(t, `{"type": 5}`), "/type"},
		{"required not a list", obj(t, `{"required": "a"}`), "/required"},
		{"minLength negative", obj(t, `{"minLength": -1}`), "/minLength"},
		{"nested bad property", obj(t, `{"properties": {"a": {"type": "object", "maxProperties": "3"}}}`), "/properties/a/maxProperties"},
		{"bad pattern", obj(t, `{"pattern": "(["}`), "pattern"},
		{"dangling local $ref", obj(t, `{"properties": {"a": {"$ref": "#/$defs/missing"}}}`), "missing"},
		{"file $ref is never read", obj(t, `{"$ref": "file://`+secret+`"}`), "may only refer"},
		{"URL $ref is never fetched", obj(t, `{"$ref": "http://127.0.0.1:1/schema.json"}`), "may only refer"},
		{"unknown $schema", obj(t, `{"$schema": "http://example.com/my-meta"}`), ""},
		{"a string", "object", "not a string"},
		{"an array", []any{map[string]any{}}, "not an array"},
		{"null", nil, "not null"},
		{"not JSON", map[string]any{"f": func() {}}, "not a JSON value"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsonschema.Compile(tc.schema)
			e, ok := errs.As(err)
			if !ok || e.Code != jsonschema.InvalidSchema || e.Status() != http.StatusBadRequest {
				t.Fatalf("Compile = %v, want 400 %s", err, jsonschema.InvalidSchema)
			}
			if !strings.Contains(e.Message, tc.reason) {
				t.Fatalf("message %q does not name %q", e.Message, tc.reason)
			}
			if strings.Contains(e.Message, "nubes:///") {
				t.Fatalf("message leaks the internal URL: %q", e.Message)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	s, err := jsonschema.Compile(obj(t, credentials))
	if err != nil {
		t.Fatal(err)
	}
	fits := []struct {
		name string
		data any
	}{
		{"minimal", obj(t, `{"access_key": "AKIA", "region": "eu"}`)},
		{"all members", obj(t, `{"access_key": "AKIA", "region": "us", "port": 443, "tags": ["a"], "nested": {"a/b": true}}`)},
		{"Go types", map[string]any{"access_key": "AKIA", "region": "eu", "port": int32(80), "tags": []string{"x"}}},
		{"integer written as 8080.0", obj(t, `{"access_key": "AKIA", "region": "eu", "port": 8080.0}`)},
	}
	for _, tc := range fits {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Validate(tc.data); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
	misfits := []struct {
		name string
		data any
		key  string
	}{
		{"missing member", obj(t, `{"region": "eu"}`), "/access_key"},
		{"wrong type", obj(t, `{"access_key": 5, "region": "eu"}`), "/access_key"},
		{"too short", obj(t, `{"access_key": "A", "region": "eu"}`), "/access_key"},
		{"not in enum", obj(t, `{"access_key": "AKIA", "region": "mars"}`), "/region"},
		{"not an integer", obj(t, `{"access_key": "AKIA", "region": "eu", "port": 1.5}`), "/port"},
		{"over maximum", obj(t, `{"access_key": "AKIA", "region": "eu", "port": 70000}`), "/port"},
		{"array item", obj(t, `{"access_key": "AKIA", "region": "eu", "tags": ["a", 2]}`), "/tags/1"},
		{"escaped member name", obj(t, `{"access_key": "AKIA", "region": "eu", "nested": {"a/b": "yes"}}`), "/nested/a~1b"},
		{"unknown member", obj(t, `{"access_key": "AKIA", "region": "eu", "colour": "red"}`), "/"},
		{"not an object", "AKIA", "/"},
		{"null", nil, "/"},
	}
	for _, tc := range misfits {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate(tc.data)
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidParameter || e.Status() != http.StatusBadRequest {
				t.Fatalf("Validate = %v, want 400 %s", err, errs.InvalidParameter)
			}
			if !strings.Contains(e.Message, "(key = "+tc.key+",") {
				t.Fatalf("message %q does not name %s", e.Message, tc.key)
			}
		})
	}
	err = s.ValidateAt("data", obj(t, `{"region": "eu"}`))
	if e, ok := errs.As(err); !ok || !strings.Contains(e.Message, "(key = data/access_key,") {
		t.Fatalf("ValidateAt = %v, want key data/access_key", err)
	}
}

func TestBooleanSchemas(t *testing.T) {
	yes, err := jsonschema.Compile(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := yes.Validate(map[string]any{"anything": 1}); err != nil {
		t.Fatalf("true schema refused: %v", err)
	}
	no, err := jsonschema.Compile(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := no.Validate(map[string]any{}); err == nil {
		t.Fatal("false schema accepted data")
	}
}
