package attribution

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLedger(t *testing.T) {
	var l Ledger
	s := func(a, b float64) Window { return Window{at(a), at(b)} }
	assert.Equal(t, 1.0, l.Unclaimed(s(0, 10)))
	l.Claim(s(2, 4))
	l.Claim(s(6, 8))
	assert.InDelta(t, 0.6, l.Unclaimed(s(0, 10)), 1e-12)
	assert.InDelta(t, 0.5, l.Unclaimed(s(3, 5)), 1e-12)
	assert.Equal(t, 0.0, l.Unclaimed(s(6, 8)))
	assert.Equal(t, 2, l.Len())
	l.Claim(s(4, 6)) // bridges the two
	assert.Equal(t, 1, l.Len())
	assert.InDelta(t, 0.4, l.Unclaimed(s(0, 10)), 1e-12)
	l.Forget(at(9))
	assert.Equal(t, 0, l.Len())
	assert.Equal(t, 0.0, l.Unclaimed(s(5, 5)), "an empty window has nothing to claim")
}

// Claims in any order leave exactly their union claimed.
func TestLedgerUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		var l Ledger
		covered := make([]bool, 1000)
		for range 1 + rng.IntN(40) {
			a := rng.IntN(1000)
			b := a + rng.IntN(100)
			l.Claim(Window{int64(a), int64(b)})
			for i := a; i < b && i < 1000; i++ {
				covered[i] = true
			}
		}
		n := 0
		for _, c := range covered {
			if c {
				n++
			}
		}
		assert.InDelta(t, 1-float64(n)/1000, l.Unclaimed(Window{0, 1000}), 1e-12)
		for i := 1; i < len(l.ranges); i++ {
			assert.Less(t, l.ranges[i-1].End, l.ranges[i].Start, "sorted, merged")
		}
	}
}
