package gpuvizreceiver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// A command line can reach megabytes (an inline chat template, a JSON
// override): it is on every process series of every scrape, and Mimir and
// Cortex skip a series with a label value over 2,048 bytes. It is kept to
// maxCommandLineBytes, cut at a whole character.
func TestProcessCommandLineIsBounded(t *testing.T) {
	head := "python3 -m vllm.entrypoints.openai.api_server --chat-template "
	long := head + strings.Repeat("x", maxCommandLineBytes-len(head)-1) + "é" + strings.Repeat("{{ messages }}", 1<<16)
	root := t.TempDir()
	fakeProc(t, root, "1000", map[string]string{"comm": "python3\n", "cmdline": strings.ReplaceAll(long, " ", "\x00") + "\x00"})
	cfg := defaultConfig()
	cfg.Processes.CommandLine = true
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	s.procRoot = root

	_, commandLine := processNames(t, s)
	require.LessOrEqual(t, len(commandLine), maxCommandLineBytes)
	assert.Equal(t, long[:maxCommandLineBytes-1], commandLine, "cut before the é that would cross the bound")
}

// Foreign input: whatever argv holds, the command line is valid UTF-8,
// within its bound, one line, and the arguments' own text where they were
// valid UTF-8 within the bound.
func FuzzCommandLine(f *testing.F) {
	f.Add([]byte("python3\x00-m\x00vllm.entrypoints.openai.api_server\x00"))
	f.Add([]byte("./serve\x00caf\xe9\x00"))
	f.Add([]byte("\x00\x00 \x00"))
	f.Add([]byte(strings.Repeat("é", maxCommandLineBytes)))
	f.Fuzz(func(t *testing.T, in []byte) {
		in = in[:min(len(in), maxCommandLineBytes)] // what readCommandLine reads
		got := commandLine(in)
		require.True(t, utf8.ValidString(got), "%q", got)
		require.LessOrEqual(t, len(got), maxCommandLineBytes)
		require.NotContains(t, got, "\x00")
		if want := strings.TrimSpace(strings.ReplaceAll(string(in), "\x00", " ")); utf8.ValidString(want) {
			require.Equal(t, want, got)
		}
	})
}
