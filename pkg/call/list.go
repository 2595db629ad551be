package call

import "context"

// ListPageSize and ListMaxPages bound one ListAll: pages of 1,000, at most
// 100 of them (a service that ignored the page would otherwise be read
// forever).
const (
	ListPageSize = 1000
	ListMaxPages = 100
)

// ListAll reads every page of a list operation at path with the service
// credential (for a schedule or worker acting on no caller's behalf),
// keeping the rows keep accepts. req is the request without its query;
// ListAll sets query.page.
func ListAll[T any](ctx context.Context, c *Client, path string, req map[string]any, keep func(T) bool) ([]T, error) {
	out := []T{}
	for page := range ListMaxPages {
		var l struct {
			Results []T `json:"results"`
		}
		req["query"] = map[string]any{"page": map[string]any{"start": page*ListPageSize + 1, "limit": ListPageSize}}
		if err := c.CallAsService(ctx, path, req, &l); err != nil {
			return nil, err
		}
		for _, r := range l.Results {
			if keep(r) {
				out = append(out, r)
			}
		}
		if len(l.Results) < ListPageSize {
			break
		}
	}
	return out, nil
}
