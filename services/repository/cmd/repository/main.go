// Command repository serves the repository service alone.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/repository"
)

func main() { os.Exit(app.Main(repository.Name, false, repository.FromEnv, repository.Defaults())) }
