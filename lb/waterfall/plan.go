package waterfall

// Compute returns the Waterfall-by-Region plan for w (DESIGN.md §3, rules 1–6).
// STUB: being implemented.
func Compute(w World, cfg Config) (*Plan, error) {
	return &Plan{}, nil
}
