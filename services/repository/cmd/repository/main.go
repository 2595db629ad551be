// Command repository serves the repository service alone; `repository
// reseal` re-seals every plugin's registry_config with the active
// encryption key.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/repository"
)

func main() {
	if sealcmd.Requested(os.Args) {
		os.Exit(repository.ResealMain(os.Args[2:]))
	}
	os.Exit(app.Main(repository.Name, false, repository.FromEnv, repository.Defaults()))
}
