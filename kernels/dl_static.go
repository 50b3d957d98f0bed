//go:build arbiter_static

package kernels

import "errors"

// Static reports whether this binary was built with the arbiter_static tag, without a
// dynamic loader: it then runs in an image FROM scratch but cannot load the testbed.
const Static = true

// ErrStatic is what Open returns in a binary built with the arbiter_static tag.
var ErrStatic = errors.New("this binary was built static (tag arbiter_static) and cannot load shared libraries; " +
	"run the cuda backend from a binary built without the tag, in an image that has a dynamic loader")

// dlopen refuses: a static binary has no dynamic loader to ask.
func dlopen(string) (uintptr, error) { return 0, ErrStatic }

// dlopenRefused is why Open refuses in a static binary.
var dlopenRefused = ErrStatic

// bind is never reached: dlopen has already refused.
func bind(uintptr, string, any) error { return ErrStatic }
