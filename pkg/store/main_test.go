package store_test

import (
	"testing"

	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestMain starts embedded FerretDB for the package; each test takes a
// fresh database from testkit.Get().Database(t).
func TestMain(m *testing.M) { testkit.Main(m) }
