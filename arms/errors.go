package arms

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ErrConfounded marks a spec whose arms would differ in more than their declared pins,
// so that a difference in outcomes could not be attributed to the varied factor.
var ErrConfounded = errors.New("confounded arms")

// SpecError is one problem in a spec, located at the node that causes it. Parse and
// Expand return every problem they find as an errors.Join of SpecErrors, sorted by
// position, so that a user can fix a spec in one go.
type SpecError struct {
	File string
	Line int // from 1; 0 when the spec was built in code
	Col  int // from 1; 0 when unknown
	// Path is the dot-separated field path, e.g. arms.treatment.env.BF16_INDEX_K;
	// empty for problems of the file as a whole (YAML syntax).
	Path string
	Msg  string
	// Err is the sentinel this problem is an instance of (ErrConfounded), or nil.
	Err error
}

// Error reads like "spec.yaml:14:3: arms.treatment.env.BF16_INDEX_K: value must be a string".
func (e *SpecError) Error() string {
	loc := e.File
	if loc == "" {
		loc = "spec"
	}
	if e.Line > 0 {
		loc += fmt.Sprintf(":%d:%d", e.Line, max(e.Col, 1))
	}
	if e.Path == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Path + ": " + e.Msg
}

// Unwrap exposes the sentinel, so errors.Is(err, ErrConfounded) works through a join.
func (e *SpecError) Unwrap() error { return e.Err }

// Errors lists the SpecErrors inside err (a single one or a join), in order.
func Errors(err error) []*SpecError {
	var out []*SpecError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		var se *SpecError
		if e, ok := err.(*SpecError); ok {
			out = append(out, e)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if errors.As(err, &se) {
			out = append(out, se)
		}
	}
	walk(err)
	return out
}

// joinSorted orders problems by position (then path) and joins them; nil when none.
func joinSorted(errs []*SpecError) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *SpecError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col), cmp.Compare(a.Path, b.Path))
	})
	// The same node can be reached twice (an alias used in two places); say it once.
	errs = slices.CompactFunc(errs, func(a, b *SpecError) bool { return a.Error() == b.Error() })
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
	}
	return errors.Join(joined...)
}
