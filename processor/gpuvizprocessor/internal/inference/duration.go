package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// ParseRustDuration parses the Debug format of Rust's std::time::Duration, as
// HuggingFace TGI writes its timing span fields (format!("{d:?}")): a decimal
// number followed by one of the units Rust prints — "s", "ms", "µs" or "ns" —
// for example "2.5s", "1.234567ms", "850µs", "12ns", "0ns". The ASCII "us"
// and the Greek-letter "μs" are accepted for microseconds too.
//
// Rust never prints minutes, hours, exponents, signs or spaces, so anything of
// that kind is an error, as are a missing integer part (".5ms"), an empty
// fraction ("1.ms") and values that do not fit a time.Duration (about 292
// years). Fraction digits below a nanosecond are truncated (Rust prints at
// most nanosecond precision, so its output converts exactly).
func ParseRustDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && (isDigit(s[i]) || s[i] == '.') {
		i++
	}
	num, unit := s[:i], s[i:]
	var mult int64
	switch unit {
	case "s":
		mult = int64(time.Second)
	case "ms":
		mult = int64(time.Millisecond)
	case "µs", "μs", "us":
		mult = int64(time.Microsecond)
	case "ns":
		mult = 1
	case "":
		return 0, durationError(s, "no unit (s, ms, µs or ns)")
	default:
		return 0, durationError(s, "unit must be s, ms, µs or ns")
	}
	intPart, frac, hasFrac := strings.Cut(num, ".")
	if intPart == "" {
		return 0, durationError(s, "no digits before the unit")
	}
	if hasFrac && (frac == "" || strings.IndexByte(frac, '.') >= 0) {
		return 0, durationError(s, "malformed decimal number")
	}
	var n int64
	for j := 0; j < len(intPart); j++ {
		d := int64(intPart[j] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, durationError(s, "too large")
		}
		n = n*10 + d
	}
	if n > math.MaxInt64/mult {
		return 0, durationError(s, "too large")
	}
	total := n * mult
	// At most nine fraction digits can matter (mult is at most 1e9), so f
	// stays below 1e9 and f*mult below 1e18.
	var f, scale int64 = 0, 1
	for j := 0; j < len(frac) && j < 9; j++ {
		f = f*10 + int64(frac[j]-'0')
		scale *= 10
	}
	fracNS := f * mult / scale
	if total > math.MaxInt64-fracNS {
		return 0, durationError(s, "too large")
	}
	return time.Duration(total + fracNS), nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

var errBadDuration = errors.New("not a Rust Debug duration")

func durationError(s, why string) error {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Errorf("%w: %q: %s", errBadDuration, s, why)
}
