package config

// A service's settings are declared once: one struct whose fields carry
// their key, default, bound and meaning in tags,
//
//	SweepEvery time.Duration `mapstructure:"event_sweep_every" default:"30s" min:"1ms" doc:"how often ..."`
//
// and the kit derives the rest from it: the defaults viper needs to read
// a key from NUBES_<KEY> at all (Defaults), the typed default value
// (SetDefaults), the bounds (Check), the list the documentation is
// checked against (Describe) and the masked print (String). Tags:
//
//	mapstructure  the key (an embedded struct with ",squash" adds its keys)
//	default       the default, as it would be written in the environment
//	min, max      bounds of a number or a duration (inclusive)
//	enum          the allowed values of a string, "a|b|c"
//	secret        "true": masked in the print, never logged
//	doc           what the key means (optional where docs/configuration.md says it)

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Key is one declared setting.
type Key struct {
	Name    string // the key, e.g. mongo_uri
	Env     string // its environment variable, e.g. NUBES_MONGO_URI
	Default string // as written in the environment ("" for none)
	Min     string
	Max     string
	Enum    []string
	Secret  bool
	Doc     string
}

// Describe lists the keys declared by v (a struct or a pointer to one),
// in declaration order.
func Describe(v any) []Key {
	var out []Key
	walkFields(reflect.TypeOf(v), func(f reflect.StructField, _ []int) {
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		k := Key{Name: name, Env: "NUBES_" + strings.ToUpper(name), Default: f.Tag.Get("default"), Min: f.Tag.Get("min"),
			Max: f.Tag.Get("max"), Secret: f.Tag.Get("secret") == "true", Doc: f.Tag.Get("doc")}
		if e := f.Tag.Get("enum"); e != "" {
			k.Enum = strings.Split(e, "|")
		}
		out = append(out, k)
	})
	return out
}

// Defaults are the defaults of v's keys for Load: every key has one, so
// every key can be set from the environment.
func Defaults(v any) map[string]any {
	d := map[string]any{}
	for _, k := range Describe(v) {
		d[k.Name] = k.Default
	}
	return d
}

// SetDefaults sets every declared field of v (a pointer to a struct) to
// its default.
func SetDefaults(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return errors.New("config: SetDefaults needs a pointer to a struct")
	}
	var err error
	walkFields(rv.Type(), func(f reflect.StructField, path []int) {
		if err == nil {
			err = setField(rv.Elem().FieldByIndex(path), f, f.Tag.Get("default"))
		}
	})
	return err
}

// Check reports the first field of v outside its declared bound.
func Check(v any) error {
	rv := reflect.Indirect(reflect.ValueOf(v))
	var err error
	walkFields(rv.Type(), func(f reflect.StructField, path []int) {
		if err == nil {
			err = checkField(rv.FieldByIndex(path), f)
		}
	})
	return err
}

// LoadDeclared loads out (a pointer to a declared struct) with Load from
// its own defaults, then checks its bounds.
func LoadDeclared(out any) error {
	if err := Load(out, Defaults(out)); err != nil {
		return err
	}
	return Check(out)
}

var durationType = reflect.TypeFor[time.Duration]()

// walkFields calls fn for every keyed field of t, embedded squashed
// structs included, with its index path.
func walkFields(t reflect.Type, fn func(reflect.StructField, []int)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var walk func(t reflect.Type, prefix []int)
	walk = func(t reflect.Type, prefix []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			path := append(slices.Clone(prefix), i)
			if f.Type.Kind() == reflect.Struct && f.Type != durationType && (opts == "squash" || (f.Anonymous && name == "")) {
				walk(f.Type, path)
				continue
			}
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			fn(f, path)
		}
	}
	walk(t, nil)
}

func setField(fv reflect.Value, f reflect.StructField, s string) error {
	bad := func(err error) error {
		return fmt.Errorf("config: default of %s (%q): %w", f.Tag.Get("mapstructure"), s, err)
	}
	switch {
	case fv.Type() == durationType:
		if s == "" {
			fv.SetInt(0)
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return bad(err)
		}
		fv.SetInt(int64(d))
	case fv.Kind() == reflect.String:
		fv.SetString(s)
	case fv.Kind() == reflect.Bool:
		b := false
		if s != "" {
			var err error
			if b, err = strconv.ParseBool(s); err != nil {
				return bad(err)
			}
		}
		fv.SetBool(b)
	case fv.CanInt():
		n, err := parseOr0(s, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
		if err != nil {
			return bad(err)
		}
		fv.SetInt(n)
	case fv.CanUint():
		n, err := parseOr0(s, func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) })
		if err != nil {
			return bad(err)
		}
		fv.SetUint(n)
	case fv.CanFloat():
		n, err := parseOr0(s, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
		if err != nil {
			return bad(err)
		}
		fv.SetFloat(n)
	case fv.Kind() == reflect.Interface && s == "":
		// A free value (a list a config file gives, or its JSON text from
		// the environment) has no default but none.
		fv.Set(reflect.Zero(fv.Type()))
	case fv.Type() == reflect.TypeFor[map[string]string]():
		m, err := ParseMap(s)
		if err != nil {
			return bad(err)
		}
		fv.Set(reflect.ValueOf(m))
	default:
		return bad(fmt.Errorf("a %s cannot be declared", fv.Type()))
	}
	return nil
}

func parseOr0[T any](s string, parse func(string) (T, error)) (T, error) {
	if s == "" {
		var zero T
		return zero, nil
	}
	return parse(s)
}

// checkField checks one field against its min, max and enum.
func checkField(fv reflect.Value, f reflect.StructField) error {
	key := f.Tag.Get("mapstructure")
	key, _, _ = strings.Cut(key, ",")
	if e := f.Tag.Get("enum"); e != "" && fv.Kind() == reflect.String && !slices.Contains(strings.Split(e, "|"), fv.String()) {
		return fmt.Errorf("config: %s is %q; want one of %s", key, fv.String(), strings.ReplaceAll(e, "|", ", "))
	}
	for _, b := range []struct {
		tag   string
		below bool
	}{{"min", true}, {"max", false}} {
		lim := f.Tag.Get(b.tag)
		if lim == "" {
			continue
		}
		var got, want float64
		switch {
		case fv.Type() == durationType:
			d, err := time.ParseDuration(lim)
			if err != nil {
				return fmt.Errorf("config: %s of %s: %w", b.tag, key, err)
			}
			got, want = float64(fv.Int()), float64(d)
		case fv.CanInt(), fv.CanUint(), fv.CanFloat():
			n, err := strconv.ParseFloat(lim, 64)
			if err != nil {
				return fmt.Errorf("config: %s of %s: %w", b.tag, key, err)
			}
			got, want = number(fv), n
		default:
			return fmt.Errorf("config: %s has a %s, which a %s cannot have", key, b.tag, fv.Type())
		}
		if b.below && got < want {
			return fmt.Errorf("config: %s is %v; it must be at least %s", key, fv.Interface(), lim)
		}
		if !b.below && got > want {
			return fmt.Errorf("config: %s is %v; it must be at most %s", key, fv.Interface(), lim)
		}
	}
	return nil
}

func number(v reflect.Value) float64 {
	switch {
	case v.CanInt():
		return float64(v.Int())
	case v.CanUint():
		return float64(v.Uint())
	}
	return v.Float()
}

// DocProblems checks the documentation of a declared struct v: the table
// under the heading "## section" of doc (docs/configuration.md) has a row
// for each of v's keys with its default (in backquotes; "empty" or "—"
// for none), and no row for a key v lacks. Each service's test runs it
// over its own struct.
func DocProblems(doc, section string, v any) []string {
	_, rest, ok := strings.Cut(doc, "\n## "+section)
	if !ok {
		return []string{fmt.Sprintf("no section %q", section)}
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	rows := map[string]string{}
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.Split(line, "|")[1], "(") // not the env names in parentheses
		for _, m := range docKey.FindAllStringSubmatch(first, -1) {
			rows[m[1]] = line
		}
	}
	var out []string
	declared := map[string]bool{}
	for _, k := range Describe(v) {
		declared[k.Name] = true
		row, ok := rows[k.Name]
		if !ok {
			out = append(out, fmt.Sprintf("%s lists no `%s`", section, k.Name))
			continue
		}
		cell := strings.Split(row, "|")[2]
		switch {
		case k.Default == "":
			if !strings.Contains(cell, "empty") && !strings.Contains(cell, "—") {
				out = append(out, fmt.Sprintf("`%s` has no default; its row says %q", k.Name, strings.TrimSpace(cell)))
			}
		case !strings.Contains(cell, "`"+k.Default+"`"):
			out = append(out, fmt.Sprintf("`%s` defaults to `%s`; its row says %q", k.Name, k.Default, strings.TrimSpace(cell)))
		}
	}
	for name := range rows {
		if !declared[name] {
			out = append(out, fmt.Sprintf("%s lists `%s`, which is not declared", section, name))
		}
	}
	slices.Sort(out)
	return out
}

var docKey = regexp.MustCompile("`([a-z0-9_]+)`")
