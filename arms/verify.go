package arms

// VerifyBar is a verify workload's fixed pass bar (`verify: {f1_min: 0.80, schema_min:
// 0.95}`), checked on each launch of each arm. A zero field sets no bar; with none at
// all the arms are judged against the reference arm's own launches instead.
type VerifyBar struct {
	// F1Min is the lowest tool-call F1 against the reference a launch may have.
	F1Min float64
	// SchemaMin is the lowest share of a launch's tool calls whose arguments are valid
	// against the tool's schema.
	SchemaMin float64
}

// Set says whether the spec names any bar.
func (b VerifyBar) Set() bool { return b.F1Min > 0 || b.SchemaMin > 0 }

// decodeVerify reads `verify:`, which only a verify workload reads.
func (d *decoder) decodeVerify(e entry) {
	bar := &d.spec.Verify
	d.fields(e.val, e.path, []string{"f1_min", "schema_min"}, func(f entry) {
		v, ok := d.number(f)
		if !ok {
			return
		}
		if !(v > 0 && v <= 1) {
			d.add(f.val, f.path, "a bar is a share above 0 and at most 1, e.g. 0.80")
			return
		}
		switch f.key {
		case "f1_min":
			bar.F1Min = v
		case "schema_min":
			bar.SchemaMin = v
		}
	})
}
