package costanalysis_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/worker"
)

// TestConfigurationDoc: docs/configuration.md "Cost analysis" lists every
// key the service declares, with its default; the declared defaults are
// the rules' own.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Cost analysis", &costanalysis.Settings{}) {
		t.Error(p)
	}
	var st costanalysis.Settings
	if err := config.SetDefaults(&st); err != nil {
		t.Fatal(err)
	}
	w := worker.DefaultConfig()
	var rates []string
	for k, v := range st.ExchangeRates {
		rates = append(rates, k+"="+v)
	}
	if st.JobTimeout != job.DefaultConfig().Timeout || st.WorkerConcurrency != w.Concurrency || st.TaskAckWait != w.AckWait ||
		st.TaskMaxDeliver != w.MaxDeliver || st.TaskBackoff != w.Backoff || st.SyncScheduleTick != costanalysis.DefaultSyncScheduleTick ||
		len(rates) != len(strings.Split(costanalysis.DefaultExchangeRates, ",")) || st.NoWorkers {
		t.Fatalf("declared defaults %+v differ from the rules'", st)
	}
}
