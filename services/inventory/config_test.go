package inventory_test

import (
	"os"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/inventory"
)

// TestConfigurationDoc: docs/configuration.md "Inventory" lists every key
// inventory declares, with its default, and no other.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Inventory", &inventory.Settings{}) {
		t.Error(p)
	}
}
