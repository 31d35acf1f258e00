package gpuvizreceiver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeProc writes a /proc/<pid> directory of the given files under root.
func fakeProc(t *testing.T, root, pid string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, pid)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
}

// processNames returns process 1000's executable name and command line
// from a scrape.
func processNames(t *testing.T, s *gpuScraper) (executable, commandLine string) {
	t.Helper()
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	found := false
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" && attrs["process.pid"] == int64(1000) {
			executable, commandLine, found = attrs["process.executable.name"].(string), attrs["process.command_line"].(string), true
		}
	})
	require.True(t, found, "process 1000's series")
	return executable, commandLine
}

// The kernel cuts a comm at 15 bytes, mid-character too ("a推理服务器", a
// binary's name, reads "a推理服务" and two bytes of 器), and argv holds
// whatever bytes it was given (a Latin-1 file name): OTLP's strings are
// UTF-8, and the official protobuf bindings refuse a whole request with
// one that is not ("string field contains invalid UTF-8").
func TestProcessNamesAreValidUTF8(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, "1000", map[string]string{
		"comm":    "a\xe6\x8e\xa8\xe7\x90\x86\xe6\x9c\x8d\xe5\x8a\xa1\xe5\x99\n",
		"cmdline": "./serve\x00--prompts\x00caf\xe9.txt\x00",
	})
	cfg := defaultConfig()
	cfg.Processes.CommandLine = true
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	s.procRoot = root

	executable, commandLine := processNames(t, s)
	assert.True(t, utf8.ValidString(executable), "%q", executable)
	assert.True(t, utf8.ValidString(commandLine), "%q", commandLine)
	assert.Equal(t, "a推理服务\uFFFD", executable)
	assert.Equal(t, "./serve --prompts caf\uFFFD.txt", commandLine)
}
