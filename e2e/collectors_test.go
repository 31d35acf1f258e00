//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/procs"
)

// builtCollector returns the repository root and the collector the tests
// run (GPUVIZ_COLLECTOR, or make build's).
func builtCollector(t *testing.T) (root, bin string) {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin = env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz"))
	_, err = os.Stat(bin)
	require.NoError(t, err, "build the collector first: make build")
	return root, bin
}

// collectorGroup returns a process group in a new directory; at the end
// of the test it stops them and, if the test failed, logs each one's first
// warnings and last lines, briefly, so that the failure above them stays
// within a CI log's tail; the whole logs go to $GPUVIZ_E2E_OUT/<test>/.
func collectorGroup(t *testing.T) (*procs.Group, string) {
	t.Helper()
	work := t.TempDir()
	group, err := procs.NewGroup(work)
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		if !t.Failed() {
			return
		}
		keep := ""
		if out := os.Getenv("GPUVIZ_E2E_OUT"); out != "" {
			keep = filepath.Join(out, t.Name())
			_ = os.MkdirAll(keep, 0o755)
		}
		for _, p := range group.Procs() {
			b, err := os.ReadFile(p.Log)
			if err != nil {
				continue
			}
			if keep != "" {
				_ = os.WriteFile(filepath.Join(keep, p.Name+".log"), b, 0o644)
			}
			t.Logf("%s: first warnings:\n%s\n%s: last lines:\n%s", p.Name, warnings(b), p.Name, tail(b, 800))
		}
		t.Logf("the failures are above these logs; whole logs in %q", keep)
	})
	return group, work
}

// spawnAgents starts one agent per fleetHosts entry on example (a file
// under examples/), each with its override file (written from override)
// and environment, and returns their OTLP/gRPC endpoints once they listen.
func spawnAgents(t *testing.T, group *procs.Group, root, bin, example string,
	override func(i, grpc, http, health int) string, environ func(host string) []string) []string {
	t.Helper()
	ports, err := procs.FreePorts(3 * len(fleetHosts))
	require.NoError(t, err)
	var endpoints []string
	for i, h := range fleetHosts {
		file := filepath.Join(t.TempDir(), fmt.Sprintf("agent-%d.yaml", i))
		require.NoError(t, os.WriteFile(file, []byte(override(i, ports[3*i], ports[3*i+1], ports[3*i+2])), 0o644))
		p, err := group.SpawnEnv("agent-"+h.name, environ(h.name), bin,
			"--config", filepath.Join(root, example), "--config", file)
		require.NoError(t, err)
		addr := fmt.Sprintf("127.0.0.1:%d", ports[3*i])
		require.NoError(t, procs.WaitReady(context.Background(), p, procs.TCPReady(addr)))
		endpoints = append(endpoints, addr)
	}
	return endpoints
}

// warnings returns a log's first warnings and errors.
func warnings(log []byte) string {
	var out []string
	for _, line := range strings.Split(string(log), "\n") {
		if (strings.Contains(line, "\twarn\t") || strings.Contains(line, "\terror\t")) && !strings.Contains(line, "kubelet.sock") {
			out = append(out, line[:min(len(line), 300)])
		}
		if len(out) == 5 {
			break
		}
	}
	return strings.Join(out, "\n")
}
