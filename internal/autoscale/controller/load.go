package controller

// Load is what the gfes report about one group, summed over them.
type Load struct {
	// InFlight is the mean requests in flight to the group's instances.
	InFlight float64
	// Requests is the requests per second sent to the group.
	Requests float64
	// Pending is the requests waiting in the gfes' pending queues for the
	// group: demand the group's instances could not take.
	Pending float64
	// Spilled is the demand (requests/s) the gfes' plans send past the
	// group to farther regions: load it would take with more capacity.
	Spilled float64
	// ACT is the mean adaptive concurrency limit the gfes hold on the
	// group's instances (requests; 0: at max_concurrency_per_instance):
	// the ACT driver's unit.
	ACT float64
}

// Concurrency returns the load as the rules' concurrency: in flight,
// waiting, and the spilled demand as the requests it would keep in flight
// here by Little's law (rate × the group's mean latency, in flight ÷
// rate). Spilled demand counts only once the group serves requests, which
// is when its latency is known.
func (l Load) Concurrency() float64 {
	c := l.InFlight + l.Pending
	if l.Spilled > 0 && l.Requests > 0 {
		c += l.Spilled * l.InFlight / l.Requests
	}
	return c
}
