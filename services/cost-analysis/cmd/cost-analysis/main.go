// Command cost-analysis serves the cost-analysis service alone and runs
// its cost job workers; `cost-analysis reseal` re-seals every data
// source's secret data with the active encryption key.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
)

func main() {
	if sealcmd.Requested(os.Args) {
		os.Exit(costanalysis.ResealMain(os.Args[2:]))
	}
	os.Exit(app.Main(costanalysis.Name, true, costanalysis.FromEnv, costanalysis.Defaults()))
}
