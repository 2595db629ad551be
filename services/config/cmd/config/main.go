// Command config serves the config service alone.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/config"
)

func main() { os.Exit(app.Main(config.Name, true, config.New)) }
