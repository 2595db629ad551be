// Command board serves the board service alone.
package main

import (
	"os"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/services/board"
)

func main() { os.Exit(app.Main(board.Name, false, board.New)) }
