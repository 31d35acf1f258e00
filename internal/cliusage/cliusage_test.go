package cliusage

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHelpSaysWhatTheToolDoesThenItsFlags(t *testing.T) {
	var out strings.Builder
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.SetOutput(&out)
	fs.Int("n", 3, "how many")
	Describe(fs, "\ntool does a thing.\n\nusage: tool [flags]\n")
	assert.ErrorIs(t, fs.Parse([]string{"-h"}), flag.ErrHelp)
	assert.Equal(t, "tool does a thing.\n\nusage: tool [flags]\n\nFlags:\n  -n int\n    \thow many (default 3)\n", out.String())

	// A flag error prints the same after the error.
	out.Reset()
	assert.Error(t, fs.Parse([]string{"-x"}))
	assert.True(t, strings.HasPrefix(out.String(), "flag provided but not defined: -x\ntool does a thing."), out.String())
}

// A tool on flag.CommandLine that calls flag.Usage itself (gpucheck, after
// refusing its arguments) prints the description too, not the flag
// package's "Usage of NAME:".
func TestFlagUsageOfTheCommandLineSaysWhatTheToolDoes(t *testing.T) {
	usage, clUsage, output := flag.Usage, flag.CommandLine.Usage, flag.CommandLine.Output()
	t.Cleanup(func() {
		flag.Usage, flag.CommandLine.Usage = usage, clUsage
		flag.CommandLine.SetOutput(output)
	})
	var out strings.Builder
	flag.CommandLine.SetOutput(&out)
	Describe(flag.CommandLine, "tool does a thing.")
	flag.Usage()
	assert.True(t, strings.HasPrefix(out.String(), "tool does a thing.\n\nFlags:\n"), out.String())
	out.Reset()
	flag.CommandLine.Usage()
	assert.True(t, strings.HasPrefix(out.String(), "tool does a thing.\n\nFlags:\n"), out.String())
}
