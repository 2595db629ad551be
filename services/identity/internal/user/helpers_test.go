package user_test

import "sort"

// fieldNames, toStrings and wrongCode are the top-level tests' own
// (users_test.go, profile_test.go), for the v1 tests moved here.

func fieldNames(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func toStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func wrongCode(code string) string {
	if code == "999999" {
		return "999998"
	}
	return "999999"
}
