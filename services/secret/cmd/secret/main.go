// Command secret serves the user-secret service alone; `secret reseal`
// re-seals every stored secret with the active encryption key.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/secret"
)

func main() {
	if sealcmd.Requested(os.Args) {
		os.Exit(secret.ResealMain(os.Args[2:]))
	}
	os.Exit(app.Main(secret.Name, true, secret.FromEnv, secret.Defaults()))
}
