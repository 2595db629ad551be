package mailer

import (
	"os"
	"reflect"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
)

// TestDeclaredDefaults: the defaults the binary reads (Config's tags) are
// the ones a Config built in code gets.
func TestDeclaredDefaults(t *testing.T) {
	var declared Config
	if err := config.SetDefaults(&declared); err != nil {
		t.Fatal(err)
	}
	if filled := (Config{}).withDefaults(); !reflect.DeepEqual(declared, filled) {
		t.Fatalf("declared %+v, filled in code %+v", declared, filled)
	}
}

// TestConfigurationDoc: the README's "Configuration" lists every key the
// mailer declares, with its default, and no other.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Configuration", &Config{}) {
		t.Error(p)
	}
}
