package inference

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRustDuration(t *testing.T) {
	ok := map[string]time.Duration{
		"1.234567ms":             1234567 * time.Nanosecond,
		"850µs":                  850 * time.Microsecond,
		"850μs":                  850 * time.Microsecond, // Greek mu
		"850us":                  850 * time.Microsecond,
		"12.5µs":                 12500 * time.Nanosecond,
		"2.5s":                   2500 * time.Millisecond,
		"12ns":                   12,
		"0ns":                    0,
		"1s":                     time.Second,
		"1.000000001s":           time.Second + 1,
		"1.0000000019s":          time.Second + 1, // below a nanosecond: truncated
		"0.1s":                   100 * time.Millisecond,
		"100ms":                  100 * time.Millisecond,
		"3600s":                  time.Hour,
		"007ms":                  7 * time.Millisecond,
		"9223372036.854775807s":  math.MaxInt64,
		"9223372036854775807ns":  math.MaxInt64,
		"9223372036854.775807ms": math.MaxInt64,
	}
	for in, want := range ok {
		got, err := ParseRustDuration(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	bad := []string{
		"", "-1ms", "+1ms", "1.5", "abc", "1e400s", "1e3ms", "ms", "1.2.3ms", ".5ms", "1.ms", "1 ms", " 1ms", "1ms ",
		"3m", "1h", "1min", "1.5MS", "1Ms", "NaNs", "infs", "1_000ms", "1,5ms",
		"9223372036.854775808s", "9223372036854775808ns", "9223372037s", "18446744073709551615.999999999s",
		"99999999999999999999999999999999ns", strings.Repeat("9", 400) + "s",
	}
	for _, in := range bad {
		_, err := ParseRustDuration(in)
		assert.Error(t, err, "%q", in)
	}
	_, err := ParseRustDuration(strings.Repeat("x", 1000))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 200, "errors quote at most a prefix of the input")
}

func FuzzParseRustDuration(f *testing.F) {
	for _, s := range []string{"1.234567ms", "850µs", "850us", "2.5s", "12ns", "0ns", "1.2.3ms", "1e400s", "9223372036.854775807s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseRustDuration(s)
		if err != nil {
			if d != 0 {
				t.Fatalf("%q: error %v with value %v", s, err, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative %v", s, d)
		}
		// What Rust would print for d parses back to d.
		if back, err := ParseRustDuration(rustDebug(d)); err != nil || back != d {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, d, rustDebug(d), back, err)
		}
	})
}

// rustDebug formats d as Rust's Debug for Duration does.
func rustDebug(d time.Duration) string {
	ns := int64(d)
	unit, div := "ns", int64(1)
	switch {
	case ns >= 1e9:
		unit, div = "s", 1e9
	case ns >= 1e6:
		unit, div = "ms", 1e6
	case ns >= 1e3:
		unit, div = "µs", 1e3
	}
	whole, frac := ns/div, ns%div
	s := strconv.FormatInt(whole, 10)
	if frac != 0 {
		digits := len(strconv.FormatInt(div, 10)) - 1
		f := strconv.FormatInt(frac, 10)
		f = strings.Repeat("0", digits-len(f)) + f
		s += "." + strings.TrimRight(f, "0")
	}
	return s + unit
}

func TestRustDebugHelper(t *testing.T) {
	assert.Equal(t, "1.234567ms", rustDebug(1234567))
	assert.Equal(t, "850µs", rustDebug(850*time.Microsecond))
	assert.Equal(t, "2.5s", rustDebug(2500*time.Millisecond))
	assert.Equal(t, "0ns", rustDebug(0))
}
