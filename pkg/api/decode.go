package api

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/strictjson"
)

// Decode reads body strictly into req and validates it: malformed JSON,
// a non-object body, an unknown field, a wrong type, a missing required
// field, an enum value outside its set or a value over its limit is a 400.
// An empty body counts as `{}`. Members are named as protobuf's JSON
// mapping names them (strictjson): snake_case or lowerCamelCase, null
// meaning not set.
//
// Validation rules come from the `v` struct tag, comma separated:
// required, max=N (string runes or list items), min=N (numbers),
// enum=A|B|C (strings and string lists). Strings are trimmed first, as
// upstream does. A type with a Validate() error method is checked last.
func Decode(body []byte, req any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		body = []byte("{}")
	}
	if body[0] != '{' {
		return errs.New(errs.JSONFormat, "The request body must be a JSON object.")
	}
	if err := strictjson.Decode(body, req, ""); err != nil {
		return err
	}
	return validate(reflect.ValueOf(req).Elem(), "")
}

// rule is the parsed `v` tag of one field.
type rule struct {
	index    []int // reflect's path to the field: an embedded struct's fields are the outer type's
	name     string
	required bool
	max      int // 0: none
	min      *int64
	enum     []string
}

var rulesCache sync.Map // reflect.Type -> []rule

func rulesOf(t reflect.Type) []rule {
	if r, ok := rulesCache.Load(t); ok {
		return r.([]rule)
	}
	var rules []rule
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// Promoted into the outer object, as encoding/json does.
			for _, r := range rulesOf(f.Type) {
				r.index = append([]int{i}, r.index...)
				rules = append(rules, r)
			}
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		r := rule{index: []int{i}, name: name}
		for part := range strings.SplitSeq(f.Tag.Get("v"), ",") {
			k, val, _ := strings.Cut(part, "=")
			switch k {
			case "required":
				r.required = true
			case "max":
				r.max, _ = strconv.Atoi(val)
			case "min":
				n, _ := strconv.ParseInt(val, 10, 64)
				r.min = &n
			case "enum":
				r.enum = strings.Split(val, "|")
			case "":
			default:
				panic(fmt.Sprintf("api: unknown rule %q on %s.%s", k, t, f.Name))
			}
		}
		rules = append(rules, r)
	}
	rulesCache.Store(t, rules)
	return rules
}

type validator interface{ Validate() error }

func validate(v reflect.Value, prefix string) error {
	if v.Kind() != reflect.Struct {
		return nil
	}
	for _, r := range rulesOf(v.Type()) {
		f := v.FieldByIndex(r.index)
		key := prefix + r.name
		if f.Kind() == reflect.String {
			f.SetString(strings.TrimSpace(f.String()))
		}
		if f.IsZero() || (f.Kind() == reflect.Slice && f.Len() == 0) {
			if r.required {
				return errs.Required(key)
			}
			continue
		}
		if err := checkField(r, f, key); err != nil {
			return err
		}
		if err := validateNested(f, key); err != nil {
			return err
		}
	}
	if val, ok := v.Addr().Interface().(validator); ok {
		return val.Validate()
	}
	return nil
}

func validateNested(f reflect.Value, key string) error {
	switch f.Kind() {
	case reflect.Pointer:
		if !f.IsNil() {
			return validateNested(f.Elem(), key)
		}
	case reflect.Struct:
		return validate(f, key+".")
	case reflect.Slice:
		for i := range f.Len() {
			if err := validateNested(f.Index(i), key+"."); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkField(r rule, f reflect.Value, key string) error {
	if f.Kind() == reflect.Pointer {
		f = f.Elem()
	}
	switch f.Kind() {
	case reflect.String:
		s := f.String()
		if r.max > 0 && utf8.RuneCountInString(s) > r.max {
			return errs.Invalid(key, fmt.Sprintf("longer than %d characters", r.max))
		}
		if r.enum != nil && !slices.Contains(r.enum, s) {
			return errs.Invalid(key, "must be one of "+strings.Join(r.enum, ", "))
		}
	case reflect.Slice:
		if r.max > 0 && f.Len() > r.max {
			return errs.Invalid(key, fmt.Sprintf("more than %d items", r.max))
		}
		for i := range f.Len() {
			e := f.Index(i)
			if e.Kind() == reflect.String {
				e.SetString(strings.TrimSpace(e.String()))
				if err := checkField(rule{max: 0, enum: r.enum}, e, key); err != nil {
					return err
				}
			}
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		if r.min != nil && f.Int() < *r.min {
			return errs.Invalid(key, fmt.Sprintf("less than %d", *r.min))
		}
	}
	return nil
}
