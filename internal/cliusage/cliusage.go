// Package cliusage gives the command-line tools' -h what the flag
// package's default leaves out: what the tool does.
package cliusage

import (
	"flag"
	"fmt"
	"strings"
)

// Describe makes fs's usage the tool's description, then its flags. For
// flag.CommandLine it sets flag.Usage too, which a tool calls itself (after
// refusing its arguments) and which otherwise still prints the flag
// package's "Usage of NAME:".
func Describe(fs *flag.FlagSet, about string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nFlags:\n", strings.TrimSpace(about))
		fs.PrintDefaults()
	}
	if fs == flag.CommandLine {
		flag.Usage = fs.Usage
	}
}
