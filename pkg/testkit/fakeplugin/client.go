package fakeplugin

import (
	"testing"

	"github.com/nubes-io/nubes/pkg/plugin"
)

// Unreachable is an endpoint where no plugin listens.
const Unreachable = "grpc://127.0.0.1:1"

// Client is a plugin client of endpoints (plugin_id -> endpoint), closed
// when the test ends.
func Client(tb testing.TB, endpoints map[string]string, opts plugin.Options) *plugin.Client {
	tb.Helper()
	c, err := plugin.New(endpoints, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
