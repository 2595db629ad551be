package api

import (
	"encoding/json"
	"strings"
)

// List is the response of every list operation: {results, total_count}.
// When the query asked for `only` or `minimal`, each result keeps just
// those top-level fields.
type List[T any] struct {
	Results    []T
	TotalCount int64
	Fields     []string // nil: every field
}

// MarshalJSON writes {results, total_count}, trimming results to Fields.
func (l List[T]) MarshalJSON() ([]byte, error) {
	results := any(l.Results)
	if l.Results == nil {
		results = []T{}
	}
	if l.Fields != nil {
		trimmed := make([]map[string]json.RawMessage, len(l.Results))
		for i, r := range l.Results {
			b, err := json.Marshal(r)
			if err != nil {
				return nil, err
			}
			var all map[string]json.RawMessage
			if err := json.Unmarshal(b, &all); err != nil {
				return nil, err
			}
			keep := map[string]json.RawMessage{}
			for _, f := range l.Fields {
				top, _, _ := strings.Cut(f, ".")
				if v, ok := all[top]; ok {
					keep[top] = v
				}
			}
			trimmed[i] = keep
		}
		results = trimmed
	}
	return json.Marshal(struct {
		Results    any   `json:"results"`
		TotalCount int64 `json:"total_count"`
	}{results, l.TotalCount})
}
