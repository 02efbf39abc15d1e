package health

// Status is the verdict on a target. Its values are the strings an operator
// writes in Config.InitialStatus and sees on status pages.
type Status string

// The statuses of a target. Only StatusHealthy takes traffic.
const (
	// StatusUnknown: no verdict yet (see the package doc).
	StatusUnknown Status = "unknown"
	// StatusHealthy: the target takes traffic.
	StatusHealthy Status = "healthy"
	// StatusUnhealthy: the target failed UnhealthyThreshold probes in a row
	// and has not yet passed HealthyThreshold in a row.
	StatusUnhealthy Status = "unhealthy"
)

// Result is the outcome of one probe.
type Result struct {
	// Err is nil when the probe passed, and otherwise says why it failed
	// (for example "status 503 not in 200-299" or a dial error).
	Err error
}

// Passed reports whether the probe passed.
func (r Result) Passed() bool { return r.Err == nil }

// State is what the Checker knows about one target: its status and the
// current run of consecutive passes or failures. It is a value; next returns
// a new one.
type State struct {
	// Status is the verdict.
	Status Status
	// Passes is the number of consecutive passed probes up to now, capped at
	// HealthyThreshold. Zero after a failure.
	Passes int
	// Fails is the number of consecutive failed probes up to now, capped at
	// UnhealthyThreshold. Zero after a pass.
	Fails int
}

// Healthy reports whether the target should take traffic.
func (s State) Healthy() bool { return s.Status == StatusHealthy }

// initialState is the State of a target before its first probe.
func initialState(cfg Config) State { return State{Status: cfg.InitialStatus} }

// next returns the state after result, with cfg's thresholds. It is pure.
//
// A pass resets Fails and counts toward HealthyThreshold; a failure resets
// Passes and counts toward UnhealthyThreshold. The status then changes only
// when the run is long enough:
//
//	Unknown   --pass-->                           Healthy
//	Unknown   --UnhealthyThreshold fails in a row--> Unhealthy
//	Healthy   --UnhealthyThreshold fails in a row--> Unhealthy
//	Unhealthy --HealthyThreshold passes in a row--> Healthy
//
// So one blip never flips a target that has a verdict (unless a threshold is
// 1). The counts are capped at their threshold so that a steady target has a
// steady State. A threshold lowered by a config change applies from the
// next result on.
func next(s State, r Result, cfg Config) State {
	if r.Passed() {
		s.Fails = 0
		s.Passes = min(s.Passes+1, max(cfg.HealthyThreshold, 1))
		if s.Status == StatusUnknown || s.Passes >= cfg.HealthyThreshold {
			s.Status = StatusHealthy
		}
		return s
	}
	s.Passes = 0
	s.Fails = min(s.Fails+1, max(cfg.UnhealthyThreshold, 1))
	if s.Fails >= cfg.UnhealthyThreshold {
		s.Status = StatusUnhealthy
	}
	return s
}
