package topology

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/redisserver"
)

// Spec describes a deployment.
type Spec struct {
	// Net is the second octet of every address (1..254) when Network is
	// not set: the deployment lives in 127.Net.0.0/16.
	Net int
	// Network, when valid, is the /16 every address is in instead of
	// 127.Net.0.0/16 (see the package doc for the plan). Zero value: unset.
	Network netip.Prefix
	// Regions, each with its zones; one instance group per zone.
	Regions []Region
	// Sites, each with its gfes.
	Sites []Site
	// ControlPlanes is the number of control plane replicas. Default 1.
	ControlPlanes int
	// Policy of the service "web" (default waterfall) and its HashScope.
	Policy    config.Policy
	HashScope config.HashScope
	// LoadAware turns the service's load-aware choice inside a group on
	// (load_aware: {enabled: true}) and Shed its shedding of global
	// overload (overload: {shed: true}), every other key of the block at
	// its default. Both need a planned Policy. Default off.
	LoadAware, Shed bool
	// ShedAdmit, when Shed and positive, is the overload block's admit
	// (the load admitted in overload over the plan's capacity); 0 leaves
	// the default, 1.
	ShedAdmit float64
	// PlanInterval and RTTInterval of every gfe (defaults 250ms, 250ms).
	PlanInterval, RTTInterval time.Duration
	// Damping of every gfe (default 0.5).
	Damping float64
	// HealthInterval of the service's health check (default 500ms, with
	// thresholds of 2).
	HealthInterval time.Duration
	// ServiceTime each backend request holds its slot (default 2ms) and
	// Queue, the requests that may wait per instance (default 64).
	ServiceTime time.Duration
	Queue       int

	// EditConfig, when set, rewrites the generated operator config before
	// it is written (tests add listeners, affinity, outlier detection...).
	EditConfig func(yaml string) string
	// GFEArgs are extra flags for every gfe.
	GFEArgs []string
	// NoFastPath serves every gfe's http and https listeners with net/http
	// alone, without the HTTP/1.1 fast path (docs/design.md §4,
	// docs/listeners.md; on by default): --fast-path=false for the --listen
	// listener, and fast_path: false on every http and https listener of the
	// written config (WithFastPath).
	NoFastPath bool
	// CPArgs are extra flags for every control plane (each may hold
	// "{ip}", replaced by the control plane's own address).
	CPArgs []string
	// InsecurePlaintext runs the control-plane gRPC in clear text
	// (--insecure-plaintext on every daemon) instead of mutual TLS.
	// Secrets are then redacted from snapshots. Default false.
	InsecurePlaintext bool
	// BackendAdmin gives every backend process a process-level admin
	// listener (testbackend --admin) at 127.N.(101+r).1:9999; see
	// Cluster.BackendAdmin.
	BackendAdmin bool
	// Redis starts a real redis-server (Debian's redis-server package must
	// be installed) at A.B.0.100:6379, and every control plane keeps its
	// quota counters there (--quota-redis). Default false: each control
	// plane counts in its own memory.
	Redis bool
	// PinControlPlanes gives the n-th gfe started (from 0) only control
	// plane n mod ControlPlanes, instead of all of them in random order:
	// gfes spread evenly over the replicas, as tests of shared state need.
	PinControlPlanes bool
	// Autoscale, when set, autoscales the groups of one region: every
	// control plane runs the autoscaler with the process provider, whose
	// instances are real testbackend processes (see AutoscaleSpec).
	Autoscale *AutoscaleSpec
}

// AutoscaleSpec autoscales the groups of region Region (docs/design.md §6). Its
// groups get the autoscaling block Block, and the region may have zero
// Instances: the control planes start them (testbackend processes, one
// instance each, at the region's backend address, ports 9500 on), each
// with the region's emulated RTTs, StartupDelay of cold start,
// max_concurrency slots of ServiceTime, and no queue: a request beyond
// the slots is refused, so that the gfe's pending queue is what holds
// waiting requests.
type AutoscaleSpec struct {
	// Region is the index of the autoscaled region in Spec.Regions.
	Region int
	// Block is the groups' autoscaling block, a YAML flow mapping such as
	// "{max_instances: 3, max_concurrency_per_instance: 4}".
	Block string
	// MaxConcurrency is each instance's slots (the block's
	// max_concurrency_per_instance). Required.
	MaxConcurrency int
	// StartupDelay is the instances' real cold start (testbackend
	// --startup-delay). Default 1s.
	StartupDelay time.Duration
	// ServiceTime is how long a request holds its slot. Default 100ms.
	ServiceTime time.Duration
	// Args are extra control-plane flags (--autoscale-tick, ...).
	Args []string
	// BackendArgs are extra testbackend flags of the instances
	// (--cpu-per-request, --cpus, ...).
	BackendArgs []string
}

// AutoscalePorts is the port range of autoscaled instances.
const AutoscalePorts = "9500-9599"

// autoscaleArgs returns the control-plane flags of Spec.Autoscale.
func (s *Spec) autoscaleArgs() []string {
	a := s.Autoscale
	if a == nil {
		return nil
	}
	ri := a.Region
	cmd := []string{"{{testbackend}}",
		"--instance", "name={{.Name}},addr={{.Address}},region={{.Region}},zone={{.Zone}}",
		"--max-concurrency", fmt.Sprint(a.MaxConcurrency), "--queue", "0",
		"--service-time", a.ServiceTime.String(), "--startup-delay", a.StartupDelay.String(), "--shutdown-timeout", "2s"}
	cmd = append(cmd, a.BackendArgs...)
	for si, site := range s.Sites {
		if d, ok := site.RTT[s.Regions[ri].Name]; ok {
			cmd = append(cmd, "--delay", fmt.Sprintf("%s/24=%v", s.ip(si+1, 0), d))
		}
	}
	j, _ := json.Marshal(cmd) // strings only: cannot fail
	args := []string{"--autoscale-provider", "process", "--autoscale-command", string(j),
		"--autoscale-ports", AutoscalePorts, "--autoscale-host", s.ip(101+ri, 1),
		"--autoscale-lease-ttl", "1s", "--autoscale-drain-delay", "1s", "--autoscale-drain-timeout", "5s"}
	return append(args, a.Args...)
}

// Demo returns the demo's deployment in 127.net.0.0/16, which the real
// benchmark drives too: regions us-east, eu-west and asia-east of two zones
// with four instances of 40 req/s each (320 req/s per region; the test
// backend enforces the rate with a token bucket and queues up to 32
// requests per instance), and sites nyc, lon and tokyo, 8 ms from their own
// region and 35 to 90 ms from the others.
func Demo(net int) Spec {
	ms := time.Millisecond
	s := Spec{
		Net:   net,
		Queue: 32,
		Sites: []Site{
			{Name: "nyc", RTT: map[string]time.Duration{"us-east": 8 * ms, "eu-west": 35 * ms, "asia-east": 90 * ms}},
			{Name: "lon", RTT: map[string]time.Duration{"us-east": 35 * ms, "eu-west": 8 * ms, "asia-east": 80 * ms}},
			{Name: "tokyo", RTT: map[string]time.Duration{"us-east": 90 * ms, "eu-west": 80 * ms, "asia-east": 8 * ms}},
		},
	}
	for _, r := range []string{"us-east", "eu-west", "asia-east"} {
		s.Regions = append(s.Regions, Region{Name: r, Zones: []string{"b", "c"}, Instances: 4, Rate: 40})
	}
	return s
}

// Region is one region of a Spec.
type Region struct {
	Name string
	// Zones are zone name suffixes ("b", "c"); the zone is Name-suffix and
	// its group Name-suffix-web.
	Zones []string
	// Instances per group.
	Instances int
	// Rate is the RATE capacity per instance, requests/s: declared in the
	// config and enforced by the test backend (max-rps) unless MaxRPS is
	// set.
	Rate float64
	// MaxRPS, when > 0, is the rate the test backend enforces per instance
	// instead of Rate: above Rate the instances have headroom over the
	// capacity the config declares (the planner still plans with Rate).
	// Default 0: the backend enforces Rate.
	MaxRPS float64
	// InstanceKeys are appended to every instance's testbackend --instance
	// spec, e.g. ",proto=tcp,max_concurrency=0".
	InstanceKeys string
	// BackendArgs are extra flags of the region's testbackend process,
	// after its instances (e.g. --antagonist rules naming some of them).
	BackendArgs []string
}

// Site is one edge site of a Spec.
type Site struct {
	Name string
	// GFEs at the site. Default 1.
	GFEs int
	// RTT from the site to each region, emulated by the backends.
	RTT map[string]time.Duration
}

// GFE is one running gfe.
type GFE struct {
	Name, Site string
	// URL of the proxy listener and of the admin listener.
	URL, Admin string
	// SourceIP is the gfe's own address.
	SourceIP string
	Proc     *proc.Proc
	args     []string
}

// Args returns a copy of the gfe's command line flags (before
// Options.Wrap): tests start look-alikes from it.
func (g *GFE) Args() []string { return append([]string(nil), g.args...) }

// Cluster is a started deployment.
type Cluster struct {
	Spec       Spec
	Dir        string
	ConfigPath string
	Bins       map[string]string
	CPs        []*proc.Proc
	CPAddrs    []string
	GFEs       []*GFE
	Backends   []*proc.Proc
	// Instances maps region name to its instance addresses.
	Instances map[string][]string
	// BackendAdmin maps region name to its backend process's admin
	// address (with Spec.BackendAdmin).
	BackendAdmin map[string]string
	// CA issued the daemons' certificates, which live in PKIDir (nil and
	// "" with Spec.InsecurePlaintext). Tests issue more with
	// CA.IssueFiles(PKIDir, ...).
	CA     *devpki.CA
	PKIDir string
	// Redis is the redis-server of Spec.Redis (nil without).
	Redis *redisserver.Server

	// GossipKeyFile is the gossip keyring file every daemon reads
	// (--gossip-key-file): one random AES-256 key, written by Start, so that
	// the deployment's gossip is authenticated as every documented
	// deployment's is (docs/design.md §9). Rewrite it and send SIGHUP to
	// rotate.
	GossipKeyFile string

	opts    Options
	cpArgs  [][]string
	cpNames []string
}

// Options for Start.
type Options struct {
	// Dir holds binaries, config and logs. Required (t.TempDir()).
	Dir string
	// Bins, when set, are prebuilt binaries by name (gfe, controlplane,
	// testbackend, and optionally loadgen); otherwise Start builds them
	// all into Dir. Load generators run in processes of their own when
	// loadgen is among them (Cluster.RunLoad).
	Bins map[string]string
	// Tee receives every process's output, prefixed by its name.
	Tee io.Writer
	// Wrap, when set, rewrites the command line of every process Start
	// and the Cluster run: name is "backend-<region>", "cp-<k>",
	// "gfe-<site>-<g>" or "loadgen-<site>", and it returns the binary and
	// arguments to run instead (the lab prefixes "ip netns exec <host>").
	// Nil runs bin with args.
	Wrap func(name, bin string, args []string) (string, []string)
	// Client is the HTTP client that reaches the processes' admin and
	// health endpoints. Nil: http.DefaultClient.
	Client *http.Client
}

// command returns the command line of process name (Options.Wrap).
func (o *Options) command(name, bin string, args []string) (string, []string) {
	if o.Wrap == nil {
		return bin, args
	}
	return o.Wrap(name, bin, args)
}

// client returns Client or http.DefaultClient.
func (o *Options) client() *http.Client {
	if o.Client == nil {
		return http.DefaultClient
	}
	return o.Client
}

func (s *Spec) defaults() {
	if s.ControlPlanes == 0 {
		s.ControlPlanes = 1
	}
	if s.Policy == "" {
		s.Policy = "waterfall"
	}
	if s.PlanInterval == 0 {
		s.PlanInterval = 250 * time.Millisecond
	}
	if s.RTTInterval == 0 {
		s.RTTInterval = 250 * time.Millisecond
	}
	if s.Damping == 0 {
		s.Damping = 0.5
	}
	if s.HealthInterval == 0 {
		s.HealthInterval = 500 * time.Millisecond
	}
	if s.ServiceTime == 0 {
		s.ServiceTime = 2 * time.Millisecond
	}
	if s.Queue == 0 {
		s.Queue = 64
	}
	for i := range s.Sites {
		if s.Sites[i].GFEs == 0 {
			s.Sites[i].GFEs = 1
		}
	}
	if a := s.Autoscale; a != nil {
		if a.StartupDelay == 0 {
			a.StartupDelay = time.Second
		}
		if a.ServiceTime == 0 {
			a.ServiceTime = 100 * time.Millisecond
		}
	}
}

// autoscaled reports whether region ri's groups are autoscaled.
func (s *Spec) autoscaled(ri int) bool { return s.Autoscale != nil && s.Autoscale.Region == ri }

// ip returns the address third.fourth in the Spec's /16.
func (s *Spec) ip(third, fourth int) string {
	if s.Network.IsValid() {
		a := s.Network.Masked().Addr().As4()
		return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], third, fourth)
	}
	return fmt.Sprintf("127.%d.%d.%d", s.Net, third, fourth)
}

// GFEIP returns the address of gfe g (from 1) of site si (from 0).
func (s *Spec) GFEIP(si, g int) string { return s.ip(si+1, g) }

// BackendIP returns the address every instance of region ri (from 0)
// listens on.
func (s *Spec) BackendIP(ri int) string { return s.ip(101+ri, 1) }

// ClientIP returns the first of the 16 client addresses (A.B.s.100 to
// A.B.s.115) the load of site si (from 0) comes from.
func (s *Spec) ClientIP(si int) netip.Addr { return netip.MustParseAddr(s.ip(si+1, 100)) }

// Addr returns the address of instance i (from 1) of zone z (from 0) of
// region r (from 0).
func (s *Spec) Addr(r, z, i int) string {
	return fmt.Sprintf("%s:%d", s.ip(101+r, 1), 9000+10*z+i)
}

// ConfigYAML renders the operator config of the deployment: one service
// "web" over every group, routed from "*".
func (s *Spec) ConfigYAML() string {
	s.defaults()
	var b strings.Builder
	b.WriteString("regions:\n")
	for ri, r := range s.Regions {
		fmt.Fprintf(&b, "  - name: %s\n    zones:\n", r.Name)
		for zi, z := range r.Zones {
			fmt.Fprintf(&b, "      - name: %s-%s\n        groups:\n          - name: %s-%s-web\n", r.Name, z, r.Name, z)
			if s.autoscaled(ri) {
				fmt.Fprintf(&b, "            autoscaling: %s\n", s.Autoscale.Block)
			}
			if r.Instances == 0 {
				b.WriteString("            instances: []\n")
			} else {
				b.WriteString("            instances:\n")
			}
			for i := 1; i <= r.Instances; i++ {
				fmt.Fprintf(&b, "              - address: %s\n", s.Addr(ri, zi, i))
			}
		}
	}
	fmt.Fprintf(&b, "services:\n  - name: web\n    policy: %s\n", s.Policy)
	if s.HashScope != "" {
		fmt.Fprintf(&b, "    hash_scope: %s\n", s.HashScope)
	}
	if s.LoadAware {
		b.WriteString("    load_aware: {enabled: true}\n")
	}
	switch {
	case s.Shed && s.ShedAdmit > 0:
		fmt.Fprintf(&b, "    overload: {shed: true, admit: %g}\n", s.ShedAdmit)
	case s.Shed:
		b.WriteString("    overload: {shed: true}\n")
	}
	b.WriteString("    balancing_mode: RATE\n    backends:\n")
	for _, r := range s.Regions {
		for _, z := range r.Zones {
			fmt.Fprintf(&b, "      - {group: %s-%s-web, max_rate_per_instance: %g}\n", r.Name, z, r.Rate)
		}
	}
	hi := s.HealthInterval
	fmt.Fprintf(&b, "    health_check: {protocol: http, path: /healthz, interval: %v, timeout: %v, healthy_threshold: 2, unhealthy_threshold: 2, jitter: 0.1}\n", hi, hi/2)
	b.WriteString("routes:\n  - {host: \"*\", path_prefix: /, service: web}\n")
	return b.String()
}

// backendArgs returns the testbackend command line of region ri: its
// instances, their capacity (max-rps MaxRPS or Rate, a burst of 1/20 s of
// it), and the RTT of every site.
func (s *Spec) backendArgs(ri int) []string {
	r := s.Regions[ri]
	rps := r.Rate
	if r.MaxRPS > 0 {
		rps = r.MaxRPS
	}
	args := []string{
		"--max-rps", fmt.Sprint(rps), "--burst", fmt.Sprint(max(1, int(rps/20))),
		"--max-concurrency", "0", "--queue", fmt.Sprint(s.Queue), "--service-time", s.ServiceTime.String(),
	}
	for si, site := range s.Sites {
		if d, ok := site.RTT[r.Name]; ok {
			args = append(args, "--delay", fmt.Sprintf("%s/24=%v", s.ip(si+1, 0), d))
		}
	}
	for zi, z := range r.Zones {
		for i := 1; i <= r.Instances; i++ {
			args = append(args, "--instance", fmt.Sprintf("name=%s-%s-%d,addr=%s,region=%s,zone=%s-%s%s", r.Name, z, i, s.Addr(ri, zi, i), r.Name, r.Name, z, r.InstanceKeys))
		}
	}
	if s.BackendAdmin {
		args = append(args, "--admin", s.BackendAdminAddr(ri))
	}
	return append(args, r.BackendArgs...)
}

// ControlPlaneIP returns the address of control plane k (from 0).
func (s *Spec) ControlPlaneIP(k int) string { return s.ip(0, k+1) }

// ControlPlaneAdmin returns the URL of control plane k's admin listener
// (from 0), without a trailing slash: its status page is at "/".
func (s *Spec) ControlPlaneAdmin(k int) string { return "http://" + s.ControlPlaneIP(k) + ":7100" }

// BackendAdminAddr is the process admin address of region ri's backend
// process when Spec.BackendAdmin is set.
func (s *Spec) BackendAdminAddr(ri int) string { return s.ip(101+ri, 1) + ":9999" }
