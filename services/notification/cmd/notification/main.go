// Command notification serves the notification service alone;
// `notification reseal` re-seals every protocol's secret data with the
// active encryption key.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/notification"
)

func main() {
	if sealcmd.Requested(os.Args) {
		os.Exit(notification.ResealMain(os.Args[2:]))
	}
	os.Exit(app.Main(notification.Name, true, notification.FromEnv, notification.Defaults()))
}
