package gfetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// parse parses the YAML y through the real loader's parser, failing tb
// with the document on error.
func parse(tb testing.TB, y, name string) *config.Config {
	tb.Helper()
	c, err := config.Parse([]byte(y), name)
	if err != nil {
		tb.Fatalf("config.Parse: %v\n%s", err, y)
	}
	return c
}

// TwoRegionConfig is a config with service "web" under policy over group
// east (us-east) and group west (eu-west), ratePerInstance requests/s per
// instance, routed from every host and path.
func TwoRegionConfig(tb testing.TB, policy string, east, west []string, ratePerInstance float64) *config.Config {
	tb.Helper()
	inst := func(addrs []string) string {
		var b strings.Builder
		for _, a := range addrs {
			fmt.Fprintf(&b, "              - address: %s\n", a)
		}
		return b.String()
	}
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
%s  - name: eu-west
    zones:
      - name: eu-west-b
        groups:
          - name: west
            instances:
%sservices:
  - name: web
    policy: %s
    backends:
      - {group: east, max_rate_per_instance: %g}
      - {group: west, max_rate_per_instance: %g}
routes:
  - {host: "*", path_prefix: /, service: web}
`, inst(east), inst(west), policy, ratePerInstance, ratePerInstance)
	return parse(tb, y, "test.yaml")
}

// Zone and Region describe the instances of a SessionConfig: one instance
// group per zone, named after the zone with "-g".
type Zone struct {
	Name  string
	Addrs []string
}

// Region is a region of a SessionConfig.
type Region struct {
	Name  string
	Zones []Zone
}

// SessionConfig renders and parses a config of regions with one service
// "web" over every group (max_rate_per_instance 1000), with serviceExtra
// appended to the service (indented by 4) and routeExtra to the route's
// flow mapping (", timeout: 1s").
func SessionConfig(tb testing.TB, policy string, regions []Region, serviceExtra, routeExtra string) *config.Config {
	tb.Helper()
	var b strings.Builder
	b.WriteString("regions:\n")
	for _, r := range regions {
		fmt.Fprintf(&b, "  - name: %s\n    zones:\n", r.Name)
		for _, z := range r.Zones {
			fmt.Fprintf(&b, "      - name: %s\n        groups:\n          - name: %s-g\n            instances:\n", z.Name, z.Name)
			for _, a := range z.Addrs {
				fmt.Fprintf(&b, "              - address: %s\n", a)
			}
		}
	}
	fmt.Fprintf(&b, "services:\n  - name: web\n    policy: %s\n    backends:\n", policy)
	for _, r := range regions {
		for _, z := range r.Zones {
			fmt.Fprintf(&b, "      - {group: %s-g, max_rate_per_instance: 1000}\n", z.Name)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(serviceExtra), "\n") {
		if l != "" {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	fmt.Fprintf(&b, "routes:\n  - {host: \"*\", path_prefix: /, service: web%s}\n", routeExtra)
	return parse(tb, b.String(), "session.yaml")
}

// TCPInstance is one instance in TCPConfig.
type TCPInstance struct {
	Addr           string
	MaxConcurrency int
}

// TCPConfig is a CONNECTION-mode service "db" over groups east (us-east)
// and west (eu-west; left out when west is empty), 100 connections per
// instance, served by tcp listener "db" with the given idle timeout (0:
// the default) and the defaults of every other field.
func TCPConfig(tb testing.TB, policy string, east, west []TCPInstance, idle time.Duration) *config.Config {
	tb.Helper()
	extra := ""
	if idle != 0 {
		extra = fmt.Sprintf("idle_timeout: %v", idle)
	}
	return TCPConfigWith(tb, policy, east, west, extra)
}

// TCPConfigWith is TCPConfig with listener "db" given the extra fields of
// listener, in YAML flow syntax ("max_connections: 3, idle_timeout: 5s";
// "" for none).
func TCPConfigWith(tb testing.TB, policy string, east, west []TCPInstance, listener string) *config.Config {
	tb.Helper()
	inst := func(is []TCPInstance) string {
		var b strings.Builder
		for _, in := range is {
			fmt.Fprintf(&b, "              - {address: %s, max_concurrency: %d}\n", in.Addr, in.MaxConcurrency)
		}
		return b.String()
	}
	westRegion, westBackend := "", ""
	if len(west) > 0 {
		westRegion = "  - name: eu-west\n    zones:\n      - name: eu-west-b\n        groups:\n          - name: west\n            instances:\n" + inst(west)
		westBackend = "      - {group: west, max_connections_per_instance: 100}\n"
	}
	if listener != "" {
		listener = ", " + listener
	}
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
%s%sservices:
  - name: db
    policy: %s
    balancing_mode: CONNECTION
    backends:
      - {group: east, max_connections_per_instance: 100}
%s    health_check: {protocol: tcp}
routes:
  - {host: "*", path_prefix: /, service: db}
listeners:
  - {name: db, protocol: tcp, port: 5432, service: db%s}
`, inst(east), westRegion, policy, westBackend, listener)
	return parse(tb, y, "tcp.yaml")
}

// Instances returns the TCPInstances of addrs, without concurrency limit.
func Instances(addrs ...string) []TCPInstance {
	out := make([]TCPInstance, len(addrs))
	for i, a := range addrs {
		out[i] = TCPInstance{Addr: a}
	}
	return out
}
