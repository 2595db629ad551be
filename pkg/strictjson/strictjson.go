// Package strictjson decodes JSON the way every Nubes request is decoded:
// unknown members are refused, and every failure is an *errs.Error (400)
// that names the member at fault in wire terms, never in Go terms.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Decode reads exactly one JSON value from b into v. at is the member path
// of b inside the request ("" for the body, "query" for a query).
func Decode(b []byte, v any, at string) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return Error(err, at)
	}
	if d.More() {
		return errs.New(errs.JSONFormat, "JSON parsing error. (reason = more than one value)")
	}
	return nil
}

// Error maps an encoding/json error onto the errs codes; an *errs.Error
// from a nested UnmarshalJSON is kept as it is.
func Error(err error, at string) error {
	if e, ok := errs.As(err); ok {
		return e
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errs.New(errs.JSONFormat, "JSON parsing error. (reason = %s)", err.Error())
	case errors.As(err, &typ):
		return errs.InvalidType(join(at, typ.Field), Kind(typ.Type))
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return errs.Invalid(join(at, strings.Trim(f, `"`)), "unknown field")
	}
	return errs.New(errs.JSONFormat, "JSON parsing error. (reason = %s)", err.Error())
}

func join(at, field string) string {
	switch {
	case at == "":
		return field
	case field == "":
		return at
	}
	return at + "." + field
}

// Kind names a Go type as its JSON kind.
func Kind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Pointer:
		return Kind(t.Elem())
	}
	return "JSON value"
}
