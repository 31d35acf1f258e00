// Package confpath puts a configuration section's path before the errors
// of the packages that validate its fields: they name a field as their
// own ("max_gpus"), and a user needs its whole YAML path
// ("history.max_gpus"), on every line, not only the first of a joined list.
package confpath // import "github.com/gpuviz/gpuviz/internal/confpath"

import "fmt"

// Prefixed returns each error err joins (or err itself) with prefix
// before it: "history." or "simulated.faults[2].". A join inside a join is
// taken apart too, so every error it holds gets a line of its own. Nil for
// a nil err.
func Prefixed(prefix string, err error) []error {
	var errs []error
	for _, e := range leaves(err) {
		errs = append(errs, fmt.Errorf("%s%w", prefix, e))
	}
	return errs
}

// leaves returns the errors err joins, the joins among them taken apart in
// turn, or err itself when it joins none; nil errors are left out.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var errs []error
	for _, e := range j.Unwrap() {
		errs = append(errs, leaves(e)...)
	}
	return errs
}
