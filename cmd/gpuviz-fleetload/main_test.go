package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/hostsink"
)

func TestParseRefusesNonsense(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hosts", "0"}, "must be positive"},
		{[]string{"--duration", "0s"}, "must be positive"},
		{[]string{"--spans-per-host", "-1"}, "--spans-per-host -1: want a number of spans per second from 0 to 1e+08"},
		// NaN sent nothing; +Inf sent as fast as the loop turns.
		{[]string{"--spans-per-host", "NaN"}, "--spans-per-host NaN: want"},
		{[]string{"--spans-per-host", "+Inf"}, "--spans-per-host +Inf: want"},
		{[]string{"--hosts", "2", "--spans-per-host", "6e7"}, "--spans-per-host 6e+07: want"},
		// Flags after a stray argument were ignored: 128 hosts for a minute.
		{[]string{"x", "--hosts", "1"}, `unexpected arguments ["x" "--hosts" "1"]`},
		// What the collector would refuse in the agents' receiver config.
		{[]string{"--interval", "200ms"}, "--interval 200ms, --gpus 8: the receiver's config: samples.interval: 250ms is longer than collection_interval (200ms)"},
		{[]string{"--gpus", "65"}, "simulated.gpus: 65 is out of range"},
	} {
		_, err := parse(tc.args, &bytes.Buffer{})
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	o, err := parse([]string{"--hosts", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 3, o.hosts)
}

func TestHelpSaysWhatItDoes(t *testing.T) {
	var out bytes.Buffer
	_, err := parse([]string{"-h"}, &out)
	assert.ErrorIs(t, err, flag.ErrHelp)
	assert.True(t, strings.HasPrefix(out.String(), "gpuviz-fleetload offers a gateway"), out.String())
	assert.Contains(t, out.String(), "-spans-per-host float")
}

func TestEveryHostGetsTheReceiversBatchesAndItsSpans(t *testing.T) {
	g := hostsink.Start(t)

	var out bytes.Buffer
	require.NoError(t, run(context.Background(), options{
		endpoint: g.Addr, hosts: 3, gpus: 2, interval: time.Second, duration: 3 * time.Second,
		prefix: "n-", spans: 10,
	}, &out))
	spans, points := g.Counts()
	require.Len(t, points, 3, "one name per host: %v", points)
	for _, h := range []string{"n-000", "n-001", "n-002"} {
		assert.Positive(t, points[h], h)
		assert.Equal(t, points["n-000"], points[h], "every host gets every batch")
		assert.Positive(t, spans[h], "%s gets its spans", h)
	}
	assert.Contains(t, out.String(), "0 exports failed")
}
