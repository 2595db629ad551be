// Command identity serves the identity service alone.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/identity"
)

func main() { os.Exit(app.Main(identity.Name, true, identity.FromEnv, identity.Defaults())) }
