// Command identity serves the identity service alone; `identity reseal`
// re-seals its stored secrets with the active encryption key, and
// `identity system-token` prints the root domain's SYSTEM token (the
// service_token of the services that call others on no caller's behalf).
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/identity"
)

func main() {
	if sealcmd.Requested(os.Args) {
		os.Exit(identity.ResealMain(os.Args[2:]))
	}
	if identity.SystemTokenRequested(os.Args) {
		os.Exit(identity.SystemTokenMain())
	}
	os.Exit(app.Main(identity.Name, true, identity.FromEnv, identity.Defaults()))
}
