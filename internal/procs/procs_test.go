package procs

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ports FreePorts hands out are free, never handed out twice, and
// never ones the kernel would pick for a listener on :0.
func TestFreePortsAreOutsideTheEphemeralRangeAndNotRepeated(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	// A listener on :0 takes a port from the ephemeral range.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	ephemeral := l.Addr().(*net.TCPAddr).Port
	require.GreaterOrEqual(t, ephemeral, hi, "the kernel's pick")

	seen := map[int]bool{}
	for range 3 {
		ports, err := FreePorts(5)
		require.NoError(t, err)
		require.Len(t, ports, 5)
		for _, p := range ports {
			assert.False(t, seen[p], "port %d handed out twice", p)
			seen[p] = true
			assert.True(t, p >= lo && p < hi, "port %d outside %d-%d", p, lo, hi-1)
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if assert.NoError(t, err, "port %d is free", p) {
				l.Close()
			}
		}
	}
}
