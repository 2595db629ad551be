// Command mailer runs the mail worker alone: it consumes mail events from
// NATS JetStream and sends them over SMTP (NUBES_SMTP_*), or writes them
// to NUBES_MAIL_DIR when no SMTP host is set. Like every Nubes binary it
// serves /healthz, /readyz and /metrics on NUBES_HTTP_ADDR.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/services/mailer"
)

// settings are every key the binary reads: the shared ones (app.Main
// loads those again, knowing the mailer's keys so a config file may hold
// them) and the mailer's.
type settings struct {
	config.Base   `mapstructure:",squash"`
	mailer.Config `mapstructure:",squash"`
}

func main() { os.Exit(run()) }

func run() int {
	var s settings
	if err := config.LoadDeclared(&s); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", mailer.Name, err)
		return 1
	}
	slog.Info("settings", "values", config.OwnString(&s.Config))
	return app.Main(mailer.Name, true, mailer.New(s.Config), mailer.Defaults())
}
