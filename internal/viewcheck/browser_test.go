package viewcheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// An interrupted run (its context ended) stops waiting for the page at
// once, instead of reading a dead browser every half second until the
// timeout (minutes in gpuviz-screenshots).
func TestWaitForEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := &Browser{ctx: ctx, cancel: func() {}}
	start := time.Now()
	_, err := b.WaitFor(5*time.Second, func(Facts) error { return nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 2*time.Second)
}
