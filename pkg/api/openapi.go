package api

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Schemer is implemented by types whose JSON form reflection cannot tell
// (custom UnmarshalJSON): they give their own JSON Schema.
type Schemer interface{ JSONSchema() map[string]any }

// OpenAPI builds an OpenAPI 3.1 document for routes. Aliases are listed
// under the canonical operation's description, not as separate paths.
func OpenAPI(title string, routes []Route, aliases map[string]string) map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	paths := map[string]any{}
	for _, route := range routes {
		r := route.Meta()
		req, resp := r.Req, r.Resp
		desc := r.Summary
		for alias, target := range aliases {
			if target == r.Path {
				desc += " Also served at " + alias + "."
			}
		}
		security := []any{map[string]any{"bearer": []any{}}}
		if r.Access.IsPublic() {
			security = []any{}
		}
		var roles []string
		for _, role := range r.Access.RoleList() {
			roles = append(roles, string(role))
		}
		paths[r.Path] = map[string]any{"post": map[string]any{
			"operationId": strings.ReplaceAll(strings.Trim(r.Path, "/"), "/", "."),
			"summary":     r.Summary,
			"description": desc,
			"security":    security,
			"x-roles":     roles,
			"requestBody": map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.ref(req)}}},
			"responses": map[string]any{
				"200":     map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": g.ref(resp)}}},
				"default": map[string]any{"description": "Error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
			},
		}}
	}
	g.defs["Error"] = map[string]any{"type": "object", "required": []string{"detail"}, "properties": map[string]any{
		"detail": map[string]any{"type": "object", "required": []string{"code", "message"}, "properties": map[string]any{
			"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}}}}}
	return map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": title, "version": "1.0.0"},
		"paths":   paths,
		"components": map[string]any{
			"schemas":         g.defs,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
		},
	}
}

// MergeOpenAPI merges documents of several services into one.
func MergeOpenAPI(title string, docs ...map[string]any) map[string]any {
	paths, schemas := map[string]any{}, map[string]any{}
	var security any
	for _, d := range docs {
		for k, v := range d["paths"].(map[string]any) {
			paths[k] = v
		}
		comp := d["components"].(map[string]any)
		for k, v := range comp["schemas"].(map[string]any) {
			schemas[k] = v
		}
		security = comp["securitySchemes"]
	}
	return map[string]any{
		"openapi":    "3.1.0",
		"info":       map[string]any{"title": title, "version": "1.0.0"},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas, "securitySchemes": security},
	}
}

type schemaGen struct{ defs map[string]any }

var schemerType = reflect.TypeFor[Schemer]()

func (g *schemaGen) ref(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() || reflect.PointerTo(t).Implements(schemerType) {
		return g.schema(t)
	}
	name := t.Name()
	if i := strings.IndexByte(name, '['); i >= 0 { // generic: List[pkg.Board] -> ListBoard
		inner := name[i+1 : len(name)-1]
		name = name[:i] + inner[strings.LastIndexByte(inner, '.')+1:]
	}
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = map[string]any{} // break cycles
		g.defs[name] = g.schema(t)
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	if reflect.PointerTo(t).Implements(schemerType) {
		return reflect.New(t).Interface().(Schemer).JSONSchema()
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.ref(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object"}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return map[string]any{"type": "string", "format": "date-time"}
		}
		if strings.HasPrefix(t.Name(), "List[") {
			item := t.Field(0).Type.Elem()
			return map[string]any{"type": "object", "required": []string{"results", "total_count"}, "properties": map[string]any{
				"results": map[string]any{"type": "array", "items": g.ref(item)}, "total_count": map[string]any{"type": "integer"}}}
		}
		props, required := map[string]any{}, []string{}
		for _, r := range rulesOf(t) {
			f := t.FieldByIndex(r.index)
			s := map[string]any{}
			for k, v := range g.ref(f.Type) {
				s[k] = v
			}
			if r.enum != nil {
				if s["type"] == "array" {
					s["items"] = map[string]any{"type": "string", "enum": r.enum}
				} else {
					s["enum"] = r.enum
				}
			}
			if r.max > 0 {
				if s["type"] == "array" {
					s["maxItems"] = r.max
				} else {
					s["maxLength"] = r.max
				}
			}
			if r.min != nil {
				s["minimum"] = *r.min
			}
			if d := f.Tag.Get("doc"); d != "" {
				s["description"] = d
			}
			props[r.name] = s
			if r.required {
				required = append(required, r.name)
			}
		}
		slices.Sort(required)
		out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			out["required"] = required
		}
		return out
	}
	return map[string]any{"description": "type " + t.String() + " (" + strconv.Quote(t.Kind().String()) + ")"}
}
