package controlplane

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// CheckConfig loads the operator configuration file at path and validates
// it exactly as New does for the first configuration and every reload: the
// reloader's Load (viper, SPILLWAY_* overrides, schema, validation), the
// canonical and redacted forms snapshots carry, then the health applier,
// which builds every health check the replica would run and refuses a file
// whose check cannot run. It returns every problem, each naming the file
// and field path as the daemon's log does; nil when the daemon would
// accept the file. It starts nothing: no listener, no gossip, no probe,
// no file watch. Certificate files named by listeners are the gfes' to
// read; the control plane never opens them (see gfe.CheckConfigFile).
func CheckConfig(path string) error {
	m := newMetrics(prometheus.NewRegistry())
	h := newHealthManager("check-config", nil, nil, nil, Options{Logger: zerolog.Nop()}, m)
	r := newReloader(path, 0, 0, []applier{{name: "health", fn: h.ApplyConfig}}, nil, zerolog.Nop(), m)
	_, err := r.Reload()
	return err
}
