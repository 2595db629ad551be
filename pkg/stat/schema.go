package stat

// JSONSchema describes the StatisticsQuery for the OpenAPI document (the
// custom decoders hide its shape from reflection).
func (q *Query) JSONSchema() map[string]any {
	str := map[string]any{"type": "string"}
	condition := obj("A filter condition.", short(map[string]any{
		"key": str, "value": map[string]any{}, "operator": str,
	}))
	conditions := list(condition)
	named := obj("Copies key as name.", short(map[string]any{"key": str, "name": str}))
	sortKey := obj("", map[string]any{"key": str, "desc": map[string]any{"type": "boolean"}})
	sort := map[string]any{
		"description": "A list of {key, desc}, one {key, desc}, or {keys: [...]}; a group key name refers to the group key.",
		"oneOf":       []any{list(sortKey), sortKey, obj("", map[string]any{"keys": list(sortKey)})},
	}
	operand := map[string]any{
		"description": "A field key, a number, or a nested {operator, fields}.",
		"oneOf":       []any{str, map[string]any{"type": "number"}, obj("", short(map[string]any{"operator": str, "fields": list(map[string]any{})}))},
	}
	group := obj("Groups rows; each output row holds the key names and the field names.", map[string]any{
		"keys": list(obj("A grouping expression.", short(map[string]any{
			"key": str, "name": str,
			"date_format": map[string]any{"type": "string", "description": "year, month, day, or a format of %Y %m %d %H %M %S %L %j %u %w"},
		}))),
		"fields": list(obj("An accumulator; key is required except for count and for push with fields.", map[string]any{
			"key": str, "k": str, "name": str, "n": str, "operator": enum(groupOps), "o": enum(groupOps),
			"fields":     map[string]any{"type": "array", "items": named, "description": "push: objects built from these keys"},
			"conditions": map[string]any{"type": "array", "items": condition, "description": "count, sum, average: ANDed eq, not, gt, gte, lt, lte"},
		})),
	})
	project := obj("Rebuilds each row; exclude_keys drops the group keys.", map[string]any{
		"fields": list(obj("name = key, or name = operator(key) or operator(fields).", short(map[string]any{
			"key": str, "name": str, "operator": enum(projectOps), "fields": list(operand),
		}))),
		"exclude_keys": map[string]any{"type": "boolean"},
	})
	unwind := obj("One row per element of the array at path; filter (eq, not, in, not_in, contain, not_contain, contain_in, not_contain_in; contain is case-sensitive) keeps matching rows.",
		map[string]any{"path": str, "filter": conditions})
	count := obj("One row {name: number of rows}.", map[string]any{"name": str})
	integer := func(min int) map[string]any { return map[string]any{"type": "integer", "minimum": min} }
	stages := map[string]any{"group": group, "project": project, "unwind": unwind, "count": count,
		"sort": sort, "limit": integer(1), "skip": integer(0)}
	var oneOf []any
	for _, name := range stageNames {
		s := obj("", map[string]any{name: stages[name]})
		s["required"] = []string{name}
		oneOf = append(oneOf, s)
	}
	return obj("StatisticsQuery: filter, then either aggregate stages (run in order) or distinct.", map[string]any{
		"filter":    conditions,
		"filter_or": conditions,
		"keyword":   str,
		"aggregate": map[string]any{"type": "array", "items": map[string]any{"oneOf": oneOf}},
		"page": obj("Rows start..start+limit-1 (1-based); with limit > 0 the response has total_count.",
			map[string]any{"start": integer(1), "limit": integer(0)}),
		"distinct": map[string]any{"type": "string", "description": "A field path: its distinct values, sorted."},
	})
}

// short adds the one-letter names that the decoders accept.
func short(props map[string]any) map[string]any {
	for long, s := range map[string]string{"key": "k", "value": "v", "operator": "o", "name": "n", "fields": "f"} {
		if p, ok := props[long]; ok {
			props[s] = p
		}
	}
	return props
}

func obj(desc string, props map[string]any) map[string]any {
	o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if desc != "" {
		o["description"] = desc
	}
	return o
}

func list(items map[string]any) map[string]any {
	return map[string]any{"type": "array", "items": items}
}

func enum(vals []string) map[string]any { return map[string]any{"type": "string", "enum": vals} }
