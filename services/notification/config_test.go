package notification_test

import (
	"os"
	"testing"

	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/notification"
	"github.com/nubes-io/nubes/services/notification/internal/dispatch"
	"github.com/nubes-io/nubes/services/notification/internal/fanout"
)

// TestConfigurationDoc: docs/configuration.md "Notification" lists every
// key the service declares, with its default; the declared defaults are
// the rules' own.
func TestConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.DocProblems(string(doc), "Notification", &notification.Settings{}) {
		t.Error(p)
	}
	var st notification.Settings
	if err := config.SetDefaults(&st); err != nil {
		t.Fatal(err)
	}
	dc := dispatch.DefaultConfig()
	if st.DispatchMaxDeliver != dc.MaxDeliver || st.DispatchBackoff != dc.Backoff || st.DispatchMaxBackoff != dc.MaxBackoff || st.DispatchTimeout != dc.CallTimeout ||
		st.NotifyMaxUsers != fanout.DefaultMaxUsers || st.NotifyMaxChannels != fanout.DefaultMaxChannels || st.InboxMaxEntries != fanout.DefaultInboxMax {
		t.Fatalf("declared defaults %+v differ from the rules' %+v", st, dc)
	}
}
