package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/hostsink"
)

func TestParseRefusesNonsense(t *testing.T) {
	for _, args := range [][]string{{"--hosts", "0"}, {"--duration", "0s"}, {"--spans-per-host", "-1"}} {
		_, err := parse(args, &bytes.Buffer{})
		assert.Error(t, err, "%v", args)
	}
	o, err := parse([]string{"--hosts", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 3, o.hosts)
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
