//go:build ignore

// gen writes command_gen.go from commands.txt, for go generate.
package main

import (
	"fmt"
	"os"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire/internal/cmdgen"
)

func main() { os.Exit(run()) }

func run() int {
	src, err := os.ReadFile("commands.txt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out, err := cmdgen.Generate(src, "commands.txt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile("command_gen.go", out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
