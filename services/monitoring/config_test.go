package monitoring_test

import (
	"os"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/monitoring"
)

// TestConfigurationDoc: docs/configuration.md "Monitoring" lists every
// key monitoring declares, with its default, and no other.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Monitoring", &monitoring.Settings{}) {
		t.Error(p)
	}
}

// Every setting can be set, the ones that had no key before included,
// and one out of bounds is refused naming its key.
func TestSettingsFromTheEnvironment(t *testing.T) {
	t.Setenv("NUBES_EVENT_SWEEP_EVERY", "5s")
	t.Setenv("NUBES_EVENT_SWEEP_AGE", "2m")
	t.Setenv("NUBES_WEBHOOK_COUNTER_FLUSH", "1s")
	t.Setenv("NUBES_EVENT_PURGE_EVERY", "10m")
	var st struct {
		config.Base         `mapstructure:",squash"`
		monitoring.Settings `mapstructure:",squash"`
	}
	if err := config.LoadDeclared(&st); err != nil {
		t.Fatal(err)
	}
	d := monitoring.DefaultConfig()
	if st.SweepEvery.String() != "5s" || st.SweepAge.String() != "2m0s" || st.CounterFlush.String() != "1s" || st.PurgeEvery.String() != "10m0s" ||
		st.IngestRate != d.IngestRate || st.LinkTTL != d.LinkTTL || st.MaxKept != 1000 {
		t.Fatalf("settings %+v", st.Settings)
	}
	t.Setenv("NUBES_WEBHOOK_RETRY_ATTEMPTS", "0")
	if err := config.LoadDeclared(&st); err == nil || err.Error() != "config: webhook_retry_attempts is 0; it must be at least 1" {
		t.Fatalf("out of bounds: %v", err)
	}
}
