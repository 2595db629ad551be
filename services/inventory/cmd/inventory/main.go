// Command inventory serves the inventory service alone, with its workers.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/inventory"
)

func main() { os.Exit(app.Main(inventory.Name, true, inventory.FromEnv, inventory.Defaults())) }
