package confpath

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPrefixed(t *testing.T) {
	bad, worse, odd := errors.New("max_gpus: 0"), errors.New("retention: -1s"), errors.New("interval: 0s")
	for _, tt := range []struct {
		name string
		err  error
		want []string
	}{
		{"nil", nil, nil},
		{"one", bad, []string{"history.max_gpus: 0"}},
		{"joined", errors.Join(bad, worse), []string{"history.max_gpus: 0", "history.retention: -1s"}},
		{"nested", errors.Join(errors.Join(bad, worse), errors.Join(errors.Join(odd)), fmt.Errorf("wrapped: %w", errors.Join(bad))),
			[]string{"history.max_gpus: 0", "history.retention: -1s", "history.interval: 0s", "history.wrapped: max_gpus: 0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range Prefixed("history.", tt.err) {
				got = append(got, e.Error())
			}
			assert.Equal(t, tt.want, got)
		})
	}
	assert.ErrorIs(t, Prefixed("history.", errors.Join(bad, worse))[1], worse, "each stays the error it was")
	assert.ErrorIs(t, Prefixed("history.", errors.Join(bad, errors.Join(worse)))[1], worse, "a nested one too")
}
