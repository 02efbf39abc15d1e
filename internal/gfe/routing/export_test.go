package routing

// Internals the external tests (package routing_test) use.
var (
	OutlierConfig    = outlierConfig
	AffinityConfig   = affinityConfig
	SessionCookieTTL = sessionCookieTTL
	PickOf           = pickOf
)
