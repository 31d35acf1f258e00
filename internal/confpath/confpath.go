// Package confpath puts a configuration section's path before the errors
// of the packages that validate its fields: they name a field as their
// own ("max_gpus"), and a user needs its whole YAML path
// ("history.max_gpus"), on every line, not only the first of a joined list.
package confpath // import "github.com/gpuviz/gpuviz/internal/confpath"

import "fmt"

// Prefixed returns each error err joins (or err itself) with prefix
// before it: "history." or "simulated.faults[2].". Nil for a nil err.
func Prefixed(prefix string, err error) []error {
	if err == nil {
		return nil
	}
	joined := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		joined = j.Unwrap()
	}
	errs := make([]error, len(joined))
	for i, e := range joined {
		errs[i] = fmt.Errorf("%s%w", prefix, e)
	}
	return errs
}
