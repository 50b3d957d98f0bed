// Package bytesize reads and writes sizes in bytes, the one way arbiter's specs, flags,
// messages and verdicts do: "8MiB", "512 KiB", "16MB" or "1048576" in; "8 MiB", "512 KiB",
// "100000 bytes" out.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// units are the multipliers Parse reads, by lower-case unit: binary for K, M, G, KiB, MiB
// and GiB, decimal for KB, MB and GB.
var units = map[string]int64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
	"kb": 1000, "mb": 1000 * 1000, "gb": 1000 * 1000 * 1000}

// Parse reads a size: a whole number of bytes, optionally followed (with or without a
// space) by a unit such as KiB, MiB, GiB, KB, MB or GB, in any case. It refuses negative
// sizes, unknown units and sizes past the int64 range.
func Parse(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	n, err := strconv.ParseInt(num, 10, 64)
	mult := units[unit]
	if err != nil || n < 0 || mult == 0 || n > math.MaxInt64/mult {
		return 0, false
	}
	return n * mult, true
}

// String writes a size as a person reads it, in the largest binary unit that divides it
// exactly: "1 GiB", "8 MiB", "512 KiB", "100000 bytes".
func String(n int64) string {
	if v, unit := exact(n); unit != "" {
		return fmt.Sprintf("%d %s", v, unit)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Compact writes a size as a flag or a spec takes it, in the same unit without the space:
// "1GiB", "8MiB", "512KiB", "100000".
func Compact(n int64) string {
	if v, unit := exact(n); unit != "" {
		return fmt.Sprintf("%d%s", v, unit)
	}
	return strconv.FormatInt(n, 10)
}

// Approx writes a size measured rather than set, to a tenth of a MiB with its bytes:
// "1.4 MiB (1468006 bytes)", or "more than ..." when only so much of it was read.
func Approx(n int64, atLeast bool) string {
	s := fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	if atLeast {
		return "more than " + s
	}
	return s
}

// exact is n in the largest binary unit that divides it; "" when none does.
func exact(n int64) (int64, string) {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return n >> 30, "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return n >> 20, "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return n >> 10, "KiB"
	}
	return n, ""
}
