package rolebinding_test

import (
	"testing"

	"github.com/nubes-io/nubes/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
