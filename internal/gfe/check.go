package gfe

import (
	"fmt"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/listeners"
	"github.com/spillway-lb/spillway/lb/routing"
)

// CheckConfigFile loads the configuration file at path and checks it as a
// gfe started with --config FILE does before it serves it: config.Load
// (SPILLWAY_* overrides, schema, validation), then what ApplySnapshot
// checks before it accepts a snapshot and which needs no socket: every
// service can be planned (routing.CheckPlannable) and every https
// listener's certificate files load. It returns every problem, each naming
// the file, and binds nothing.
func CheckConfigFile(path string) error {
	c, err := config.Load(path)
	if err != nil {
		return err
	}
	if err := routing.CheckPlannable(routing.FromConfig("file:"+path, c)); err != nil {
		return fmt.Errorf("%s: cannot be planned: %w", path, err)
	}
	if err := listeners.CheckCertificates(c.Listeners); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
