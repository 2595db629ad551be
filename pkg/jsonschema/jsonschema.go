// Package jsonschema compiles JSON Schemas that clients send (repository
// schemas, credential forms) and validates data against them, answering
// with the errs codes of the suite: an invalid schema is 400
// ERROR_INVALID_SCHEMA, data that does not fit is 400
// ERROR_INVALID_PARAMETER naming the failing place in the data.
//
// It wraps github.com/santhosh-tekuri/jsonschema/v6 (drafts 4 to
// 2020-12; 2020-12 when the schema names none). A client's schema is
// untrusted: it is compiled with no loader, so a "$ref" to a file or a URL
// is refused rather than read; only the standard meta-schemas, which the
// library embeds, resolve. It knows no service and stores nothing.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	js "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/nubes-io/nubes/pkg/errs"
)

// InvalidSchema is the code of a schema that is not a valid JSON Schema.
const InvalidSchema = errs.InvalidSchema

// Schema is a compiled schema, safe for concurrent use.
type Schema struct{ s *js.Schema }

// location is the made-up URL a client's schema is compiled under; it
// only appears in the library's own messages.
const location = "nubes:///schema.json"

var printer = message.NewPrinter(language.English)

// Compile checks that schema (a JSON object or boolean, as decoded by
// encoding/json, or any value that marshals to one) is a valid JSON Schema
// and compiles it. A bad schema answers 400 ERROR_INVALID_SCHEMA.
func Compile(schema any) (*Schema, error) {
	doc, err := normalize(schema)
	if err != nil {
		return nil, errs.New(errs.InvalidSchema, "Invalid JSON Schema. (reason = %s)", err.Error())
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, errs.New(errs.InvalidSchema, "Invalid JSON Schema. (reason = a schema is a JSON object or a boolean, not %s)", jsonType(doc))
	}
	c := js.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(location, doc); err != nil {
		return nil, errs.New(errs.InvalidSchema, "Invalid JSON Schema. (reason = %s)", err.Error())
	}
	s, err := c.Compile(location)
	if err != nil {
		return nil, errs.New(errs.InvalidSchema, "Invalid JSON Schema. (reason = %s)", compileReason(err))
	}
	return &Schema{s: s}, nil
}

// Validate checks data against the schema. Data that does not fit answers
// 400 ERROR_INVALID_PARAMETER whose key is the JSON Pointer of the failing
// value ("/" for the whole document, "/access_key" for a member).
func (s *Schema) Validate(data any) error { return s.ValidateAt("", data) }

// ValidateAt is Validate for data sent in the request field named field:
// the error's key is field followed by the JSON Pointer ("data/access_key").
func (s *Schema) ValidateAt(field string, data any) error {
	doc, err := normalize(data)
	if err != nil {
		return errs.Invalid(keyOf(field, nil), err.Error())
	}
	err = s.s.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *js.ValidationError
	if !errors.As(err, &ve) {
		return errs.Invalid(keyOf(field, nil), err.Error())
	}
	leaf := firstLeaf(ve)
	path := leaf.InstanceLocation
	// A missing member is named by its own path, not by its parent's.
	if r, ok := leaf.ErrorKind.(*kind.Required); ok && len(r.Missing) > 0 {
		path = append(append([]string{}, path...), r.Missing[0])
	}
	return errs.Invalid(keyOf(field, path), leaf.ErrorKind.LocalizedString(printer))
}

// firstLeaf is the first innermost cause: the most precise complaint.
func firstLeaf(e *js.ValidationError) *js.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}

// keyOf renders a field and an instance location as field + JSON Pointer.
func keyOf(field string, path []string) string {
	var b strings.Builder
	b.WriteString(field)
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1"))
	}
	if len(path) == 0 {
		b.WriteByte('/')
	}
	return b.String()
}

// normalize turns v into plain JSON values with exact numbers (json.Number),
// whatever Go types it came in (maps and slices of any kind, structs, BSON
// integers).
func normalize(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not a JSON value: %v", err)
	}
	return js.UnmarshalJSON(bytes.NewReader(raw))
}

// compileReason is the library's complaint without its made-up URL.
func compileReason(err error) string {
	var se *js.SchemaValidationError
	var ve *js.ValidationError
	if errors.As(err, &se) && errors.As(se.Err, &ve) {
		leaf := firstLeaf(ve)
		return fmt.Sprintf("at %s: %s", keyOf("", leaf.InstanceLocation), leaf.ErrorKind.LocalizedString(printer))
	}
	return strings.ReplaceAll(err.Error(), location, "schema")
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case []any:
		return "an array"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// refuseLoader loads nothing: a client's schema may not make the server
// read files or fetch URLs.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a schema may only refer to itself and to the standard meta-schemas, not to %s", url)
}
