// Command dashboard serves the dashboard service alone.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/dashboard"
)

func main() { os.Exit(app.Main(dashboard.Name, true, dashboard.New)) }
