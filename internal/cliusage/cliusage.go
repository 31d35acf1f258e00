// Package cliusage gives the command-line tools' -h what the flag
// package's default leaves out: what the tool does.
package cliusage

import (
	"flag"
	"fmt"
	"strings"
)

// Describe makes fs's usage the tool's description, then its flags.
func Describe(fs *flag.FlagSet, about string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nFlags:\n", strings.TrimSpace(about))
		fs.PrintDefaults()
	}
}
