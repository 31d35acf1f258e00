package view

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Whatever a span or a GPU calls itself, its JSON parses back to it
// (invalid UTF-8 as U+FFFD, as encoding/json reads it).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "GPU-a", "a\x01b", "\a\v\x7f", "\xff\xfe", "\U000e0001", "\u2028\u2029", `"\`, "node-\x1b[2J", "é日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString([]byte("x"), s)
		require.Equal(t, byte('x'), b[0])
		var got string
		require.NoError(t, json.Unmarshal(b[1:], &got), "%q → %s", s, b[1:])
		assert.Equal(t, string([]rune(s)), got, "each invalid byte a U+FFFD")
		assert.True(t, utf8.Valid(b))
		assert.NotContains(t, string(b), "\u2028")
	})
}

// Foreign names reach the JSON answer as JSON, and no longer than maxText.
func TestForeignNamesInTheAnswer(t *testing.T) {
	r := NewRegistry(Limits{Retention: time.Minute, MaxGPUs: 4, MaxRequests: 10}, "", func() time.Time { return t0 })
	s, _ := r.RegisterSource("gpuviz")
	long := strings.Repeat("é", 1000) // 2,000 bytes
	g := s.GPU("node-\x1b[2J", "GPU-\xff"+long)
	g.SetInfo(0, "H200\a")
	g.Add(Power, t0.UnixNano(), 300)
	s.AddRequest(&Request{Start: t0.UnixNano(), End: t0.Add(time.Second).UnixNano(), Model: "m\x01" + long, Family: "vllm", GPUs: []*GPU{g}, InputTokens: -1, OutputTokens: -1})
	b := s.AppendView(nil, Query{Range: time.Minute, Columns: 60, Since: math.MaxInt64, HasSince: true}, t0, "")
	var a struct {
		Time     []int64
		GPUs     []struct{ Host, UUID, Name string }
		Requests []struct{ Model string }
	}
	require.NoError(t, json.Unmarshal(b, &a), "%.200s", b)
	assert.Len(t, a.Time, 1, "since past now: the newest column only")
	require.Len(t, a.GPUs, 1)
	assert.Equal(t, "node-\x1b[2J", a.GPUs[0].Host)
	assert.Equal(t, "H200\a", a.GPUs[0].Name)
	assert.LessOrEqual(t, len(a.GPUs[0].UUID), maxText+2, "clipped (one invalid byte became U+FFFD)")
	require.Len(t, a.Requests, 1)
	assert.True(t, strings.HasPrefix(a.Requests[0].Model, "m\x01é"))
	assert.LessOrEqual(t, len(a.Requests[0].Model), maxText)
	assert.True(t, utf8.ValidString(a.Requests[0].Model), "cut at a rune's start")
}
