package repository_test

import (
	"encoding/base64"
	"os"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/repository"
)

// TestConfigurationDoc: docs/configuration.md "Repository" lists every
// key the repository declares, with its default, and no other.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Repository", &repository.Settings{}) {
		t.Error(p)
	}
}

// The settings are read from the environment, remote_repositories as its
// JSON text, and turn into the service's configuration.
func TestSettingsFromTheEnvironment(t *testing.T) {
	t.Setenv("NUBES_REMOTE_REPOSITORIES", `[{"name":"hub","url":"https://repo.example.com","token":"t"}]`)
	t.Setenv("NUBES_OUTWARD_ALLOW_PRIVATE", "true")
	t.Setenv("NUBES_ENCRYPTION_KEYS", "k1:"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
	var st repository.BinarySettings
	if err := config.LoadDeclared(&st); err != nil {
		t.Fatal(err)
	}
	cfg, err := st.Config()
	if err != nil {
		t.Fatal(err)
	}
	if st.PublicHubURL != repository.DefaultPublicHub || !st.Private || st.Loopback || len(cfg.Remotes) != 1 || cfg.Remotes[0].Name != "hub" {
		t.Fatalf("settings %+v, remotes %+v", st.Settings, cfg.Remotes)
	}
	t.Setenv("NUBES_REMOTE_REPOSITORIES", "")
	var none repository.BinarySettings
	if err := config.LoadDeclared(&none); err != nil {
		t.Fatal(err)
	}
	if cfg, err := none.Config(); err != nil || len(cfg.Remotes) != 0 {
		t.Fatalf("no remotes: %+v %v", cfg.Remotes, err)
	}
}
