package identity_test

import (
	"os"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/identity"
)

// TestConfigurationDoc: docs/configuration.md "Identity" lists every key
// identity declares, with its default, and no other.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Identity", &identity.Settings{}) {
		t.Error(p)
	}
}

// Every identity setting is read from the environment, and one out of
// bounds is refused naming its key.
func TestSettingsFromTheEnvironment(t *testing.T) {
	t.Setenv("NUBES_ACCESS_TOKEN_TTL", "10m")
	t.Setenv("NUBES_ACCOUNT_COLLECTOR_PLUGINS", "aws=plugin-aws-account-collector")
	var st identity.BinarySettings
	if err := config.LoadDeclared(&st); err != nil {
		t.Fatal(err)
	}
	if st.AccessTTL.String() != "10m0s" || st.RefreshTTL.String() != "3h0m0s" || st.RootDomain != "root" || st.MaxLoginFailures != 10 ||
		st.AccountCollectors["aws"] != "plugin-aws-account-collector" {
		t.Fatalf("settings %+v", st.Settings)
	}
	t.Setenv("NUBES_MAX_LOGIN_FAILURES", "0")
	if err := config.LoadDeclared(&st); err == nil || err.Error() != "config: max_login_failures is 0; it must be at least 1" {
		t.Fatalf("out of bounds: %v", err)
	}
}
