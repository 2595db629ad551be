package freeform

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/nubes-io/nubes/pkg/errs"
)

// Kind says how a query path goes on inside a free-form field.
type Kind int

const (
	// Nested (Map, List): each dotted segment goes one level down.
	Nested Kind = iota + 1
	// Whole (Flat): everything after the field is one key.
	Whole
)

// Fields are a resource's free-form fields by path from the document's
// root ("tags", "plugin_info.options"), as FieldsOf finds them.
type Fields map[string]Kind

var (
	tMap  = reflect.TypeFor[Map]()
	tFlat = reflect.TypeFor[Flat]()
	tList = reflect.TypeFor[List]()
)

// FieldsOf finds the free-form fields of T by their JSON names, in T and
// in the structs it holds (a collector's plugin_info.options).
func FieldsOf[T any]() Fields {
	out := Fields{}
	fieldsOf(reflect.TypeFor[T](), "", out, 0)
	return out
}

func fieldsOf(t reflect.Type, prefix string, out Fields, depth int) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || depth > 4 {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		switch f.Type {
		case tMap, tList:
			out[prefix+name] = Nested
		case tFlat:
			out[prefix+name] = Whole
		default:
			fieldsOf(f.Type, prefix+name+".", out, depth+1)
		}
	}
}

// Path is the stored path of query path p: the part inside a free-form
// field escaped as its keys are (segment by segment in a Nested field,
// whole in a Whole one). Other paths are unchanged.
func (fs Fields) Path(p string) string {
	field, kind := "", Kind(0)
	for f, k := range fs {
		if len(f) > len(field) && strings.HasPrefix(p, f+".") {
			field, kind = f, k
		}
	}
	if kind == 0 {
		return p
	}
	rest := p[len(field)+1:]
	if kind == Whole {
		return field + "." + EscapeKey(rest)
	}
	segs := strings.Split(rest, ".")
	for i, s := range segs {
		segs[i] = EscapeKey(s)
	}
	return field + "." + strings.Join(segs, ".")
}

// Rewrite is a path visitor (query.Query.Paths, stat.Query.Paths) that
// turns each path into its stored form.
func (fs Fields) Rewrite(_ string, p *string) error {
	*p = fs.Path(*p)
	return nil
}

// maxCheckDepth bounds how deep a free-form value may nest.
const maxCheckDepth = 32

// Check refuses a free-form value no store can keep: a key that is empty,
// holds NUL or is not UTF-8, at any depth, or nesting deeper than 32
// levels. Dots, slashes, colons and a leading $ are kept (escaped in the
// store). The 400 names field and the key, never a value.
func Check(field string, v any) error { return check(field, v, 0) }

func check(field string, v any, depth int) error {
	if depth > maxCheckDepth {
		return errs.Invalid(field, fmt.Sprintf("nested deeper than %d levels", maxCheckDepth))
	}
	switch x := v.(type) {
	case nil, string, bool, int64, float64:
		return nil
	case map[string]any:
		return checkMap(field, x, depth)
	case Map:
		return checkMap(field, x, depth)
	case Flat:
		return checkMap(field, x, depth)
	case []any:
		return checkList(field, x, depth)
	case List:
		return checkList(field, x, depth)
	}
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String:
		for it := rv.MapRange(); it.Next(); {
			if err := checkKey(field, it.Key().String()); err != nil {
				return err
			}
			if err := check(field, it.Value().Interface(), depth+1); err != nil {
				return err
			}
		}
	case (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array) && rv.Type().Elem().Kind() != reflect.Uint8:
		for i := range rv.Len() {
			if err := check(field, rv.Index(i).Interface(), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkMap(field string, m map[string]any, depth int) error {
	for k, e := range m {
		if err := checkKey(field, k); err != nil {
			return err
		}
		if err := check(field, e, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func checkList(field string, l []any, depth int) error {
	for _, e := range l {
		if err := check(field, e, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func checkKey(field, k string) error {
	if k == "" || strings.ContainsRune(k, 0) || !utf8.ValidString(k) {
		return errs.Invalid(field, fmt.Sprintf("key %q: keys must not be empty or hold NUL", k))
	}
	return nil
}

// CheckAll is Check over field, value pairs, in order.
func CheckAll(pairs ...any) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := Check(pairs[i].(string), pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}
