//go:build !arbiter_static

package kernels

import "github.com/ebitengine/purego"

// Static reports whether this binary was built with the arbiter_static tag, without a
// dynamic loader: it then runs in an image FROM scratch but cannot load the testbed.
const Static = false

// dlopenRefused is never returned here: Open checks Static first.
var dlopenRefused error

// dlopen loads the library at path through purego. purego asks the system's dynamic
// loader for dlopen, which makes every binary that links it dynamically linked, even
// one built with CGO_ENABLED=0.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// bind points the function variable fn at the library's symbol name.
func bind(h uintptr, name string, fn any) error {
	addr, err := purego.Dlsym(h, name)
	if err != nil {
		return err
	}
	purego.RegisterFunc(fn, addr)
	return nil
}
