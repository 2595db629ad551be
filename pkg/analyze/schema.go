package analyze

// JSONSchema describes the AnalyzeQuery for the OpenAPI document (the
// custom decoders hide its shape from reflection).
func (q *Query) JSONSchema() map[string]any {
	return obj("AnalyzeQuery: filter, then group_by and fields, the field_group pivot, select, sort and page.", members())
}

// JSONSchema describes the TimeSeriesAnalyzeQuery.
func (q *TimeSeriesQuery) JSONSchema() map[string]any {
	m := members()
	m["granularity"] = map[string]any{"type": "string", "enum": granularities,
		"description": "Adds the service's date field as the group key \"date\"."}
	m["start"] = map[string]any{"type": "string", "description": "YYYY, YYYY-MM or YYYY-MM-DD; inclusive."}
	m["end"] = map[string]any{"type": "string", "description": "YYYY, YYYY-MM or YYYY-MM-DD; its whole period is included."}
	return obj("TimeSeriesAnalyzeQuery: an AnalyzeQuery over the service's date field, with granularity, start and end.", m)
}

func members() map[string]any {
	str := map[string]any{"type": "string"}
	condition := obj("A filter condition (key/k, value/v, operator/o).", map[string]any{
		"key": str, "k": str, "value": map[string]any{}, "v": map[string]any{}, "operator": str, "o": str,
	})
	sortKey := obj("", map[string]any{"key": str, "desc": map[string]any{"type": "boolean"}})
	operand := map[string]any{
		"description": "An output name, a number, or a nested {operator, fields}.",
		"oneOf": []any{str, map[string]any{"type": "number"},
			obj("", map[string]any{"operator": str, "fields": map[string]any{"type": "array", "items": map[string]any{}}})},
	}
	integer := func(min int) map[string]any { return map[string]any{"type": "integer", "minimum": min} }
	return map[string]any{
		"filter":    list(condition),
		"filter_or": list(condition),
		"keyword":   str,
		"group_by": map[string]any{"type": "array", "description": "A path (named by its last segment) or {key, name}.",
			"items": map[string]any{"oneOf": []any{str, obj("", map[string]any{"key": str, "name": str})}}},
		"field_group": map[string]any{"type": "array", "items": str,
			"description": "group_by names to pivot: each field becomes a list of {value, <these keys>}; count, sum, average, max and min also get _total_<field>."},
		"fields": map[string]any{"type": "object", "description": "Output name -> accumulator.",
			"additionalProperties": obj("key is required except for count, and for push with fields (output name -> source key).", map[string]any{
				"operator":  map[string]any{"type": "string", "enum": fieldOps},
				"key":       str,
				"fields":    map[string]any{"type": "object", "additionalProperties": str},
				"data_type": map[string]any{"type": "string", "enum": []string{"array"}, "description": "sum, average, max, min: over each row's array first."},
			})},
		"select": map[string]any{"type": "object", "description": "Output name -> an output name to copy, or {operator, key | fields}; only these names come back.",
			"additionalProperties": map[string]any{"oneOf": []any{str, obj("", map[string]any{
				"operator": map[string]any{"type": "string", "enum": selectOps},
				"key":      str,
				"fields":   list(operand),
			})}}},
		"sort": map[string]any{"description": "A list of {key, desc} over output names; with field_group a field sorts by its total.",
			"oneOf": []any{list(sortKey), sortKey, obj("", map[string]any{"keys": list(sortKey)})}},
		"page": obj("Rows start..start+limit-1 (1-based); with limit > 0 the response has more.",
			map[string]any{"start": integer(0), "limit": integer(0)}),
	}
}

func obj(desc string, props map[string]any) map[string]any {
	o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if desc != "" {
		o["description"] = desc
	}
	return o
}

func list(items any) map[string]any { return map[string]any{"type": "array", "items": items} }
