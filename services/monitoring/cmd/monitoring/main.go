// Command monitoring serves the monitoring service alone.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/monitoring"
)

func main() { os.Exit(app.Main(monitoring.Name, true, monitoring.FromEnv, monitoring.Defaults())) }
