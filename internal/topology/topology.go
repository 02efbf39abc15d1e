// Package topology starts a whole Spillway deployment on loopback as real
// processes — control planes, gfes and test backends — for the demo, the
// end-to-end tests and the real benchmark.
//
// # Addresses
//
// Everything of one Cluster lives in 127.N.0.0/16, N = Spec.Net, so several
// clusters (parallel test packages, the demo) never share a port; or in
// Spec.Network, another /16 (the namespace lab's 10.77.0.0/16). With A.B
// the /16's first two octets:
//
//	A.B.0.k          control plane k (gRPC :7000, admin :7100, gossip :7946)
//	A.B.0.100        redis-server :6379, with Spec.Redis
//	A.B.s.g          gfe g (from 1) of site s (sites numbered from 1):
//	                 proxy :8080, admin :9090, gossip :7946, and the source
//	                 address of its connections to backends
//	A.B.s.100-115    the load generator's client addresses for site s
//	A.B.(100+r).1    the backends of region r (from 1), instance i of zone z
//	                 on port 9000+10·z+i
//
// The test backends emulate each site's RTT to their region from the source
// /24 of the site's gfes (testbackend --delay).
//
// # Hosts
//
// By default every process runs on this host. Options.Wrap rewrites each
// command line (the lab runs each in a network namespace of its own) and
// Options.Client is the HTTP client Start and Cluster's methods reach the
// processes with.
//
// # Mutual TLS
//
// Unless Spec.InsecurePlaintext is set, Start makes a throwaway CA
// (package devpki) and certificates under Dir/pki, and the control planes
// and gfes talk gRPC over mutual TLS, as a documented deployment does:
// control plane k's certificate names its IP address and
// cp-k.cp.spillway.internal; gfe g's names g.gfe.spillway.internal; the
// control planes allow "*.gfe.spillway.internal".
package topology

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/loadgen"
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
	// alone, without the HTTP/1.1 fast path (issue #14; on by default):
	// --fast-path=false for the --listen listener, and fast_path: false on
	// every http and https listener of the written config (WithFastPath).
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
	// (--gossip-key-file): one random AES-256 key, written by Start, so
	// that the deployment's gossip is authenticated as every documented
	// deployment's is (DESIGN.md §9). Rewrite it and send SIGHUP to rotate.
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
}

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
			fmt.Fprintf(&b, "      - name: %s-%s\n        groups:\n          - name: %s-%s-web\n            instances:\n", r.Name, z, r.Name, z)
			for i := 1; i <= r.Instances; i++ {
				fmt.Fprintf(&b, "              - address: %s\n", s.Addr(ri, zi, i))
			}
		}
	}
	fmt.Fprintf(&b, "services:\n  - name: web\n    policy: %s\n", s.Policy)
	if s.HashScope != "" {
		fmt.Fprintf(&b, "    hash_scope: %s\n", s.HashScope)
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
	return args
}

// ControlPlaneIP returns the address of control plane k (from 0).
func (s *Spec) ControlPlaneIP(k int) string { return s.ip(0, k+1) }

// ControlPlaneAdmin returns the URL of control plane k's admin listener
// (from 0), without a trailing slash: its status page is at "/".
func (s *Spec) ControlPlaneAdmin(k int) string { return "http://" + s.ControlPlaneIP(k) + ":7100" }

// BackendAdminAddr is the process admin address of region ri's backend
// process when Spec.BackendAdmin is set.
func (s *Spec) BackendAdminAddr(ri int) string { return s.ip(101+ri, 1) + ":9999" }

// Binaries are the commands a Cluster runs, for proc.Build.
var Binaries = []string{"gfe", "controlplane", "testbackend", "loadgen"}

// Start builds what is missing and starts the deployment: backends, control
// planes, then gfes, and waits until every gfe is ready (has a plan). On
// error it stops what it started.
func Start(ctx context.Context, spec Spec, opts Options) (c *Cluster, err error) {
	spec.defaults()
	if opts.Dir == "" {
		return nil, errors.New("topology: Options.Dir is required")
	}
	started := &Cluster{Spec: spec, Dir: opts.Dir, opts: opts, Bins: opts.Bins, Instances: map[string][]string{}, BackendAdmin: map[string]string{}}
	c = started
	defer func() {
		if err != nil {
			started.Stop() // c is nil by then
		}
	}()
	// In order: each step needs what the steps before it started.
	steps := []func(context.Context) error{
		c.build,
		c.writeConfig,
		c.makePKI,
		c.startBackends,
		c.waitBackends,
		c.startRedis,
		c.startControlPlanes,
		c.waitControlPlanes,
		c.startGFEs,
		c.waitGFEs,
		c.waitConverged,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// build builds the Binaries into Dir/bin unless Options.Bins gave them.
func (c *Cluster) build(ctx context.Context) error {
	if c.Bins != nil {
		return nil
	}
	var err error
	c.Bins, err = proc.Build(ctx, filepath.Join(c.Dir, "bin"), false, Binaries...)
	return err
}

// WithFastPath returns config y with fast_path: on on every http and https
// listener of its top-level listeners section, in block ("protocol: http"
// on a line of its own) or flow ({..., protocol: http, ...}) style.
func WithFastPath(y string, on bool) string {
	set := fmt.Sprintf("fast_path: %v", on)
	lines := strings.Split(y, "\n")
	in := false
	var out []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "listeners:"):
			in = true
		case l != "" && l[0] != ' ' && l[0] != '-' && l[0] != '#':
			in = false
		}
		if !in {
			out = append(out, l)
			continue
		}
		if i := strings.Index(l, "protocol: http"); i >= 0 {
			if strings.Contains(l, "{") {
				l = l[:i] + set + ", " + l[i:]
			} else {
				out = append(out, l)
				indent := l[:i]
				if t := strings.TrimLeft(indent, " "); t != "" { // "  - protocol: http"
					indent = strings.Repeat(" ", len(indent))
				}
				l = indent + set
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// writeConfig writes the deployment's config (Spec.ConfigYAML, then
// Spec.EditConfig) to Dir/spillway.yaml and sets ConfigPath, and a new
// gossip key to Dir/gossip.keyring (GossipKeyFile).
func (c *Cluster) writeConfig(context.Context) error {
	c.ConfigPath = filepath.Join(c.Dir, "spillway.yaml")
	yaml := c.Spec.ConfigYAML()
	if c.Spec.EditConfig != nil {
		yaml = c.Spec.EditConfig(yaml)
	}
	if c.Spec.NoFastPath {
		yaml = WithFastPath(yaml, false)
	}
	if err := os.WriteFile(c.ConfigPath, []byte(yaml), 0o644); err != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("topology: gossip key: %w", err)
	}
	c.GossipKeyFile = filepath.Join(c.Dir, "gossip.keyring")
	return os.WriteFile(c.GossipKeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}

// GFEIdentitySuffix is the DNS suffix of every gfe certificate's name;
// control planes allow "*" + GFEIdentitySuffix.
const GFEIdentitySuffix = ".gfe.spillway.internal"

// makePKI makes the CA and its directory, unless the Spec asks for plain
// text. Certificates are issued as processes are first started.
func (c *Cluster) makePKI(context.Context) error {
	if c.Spec.InsecurePlaintext {
		return nil
	}
	var err error
	if c.CA, err = devpki.NewCA("spillway topology CA", 7*24*time.Hour); err != nil {
		return err
	}
	c.PKIDir = filepath.Join(c.Dir, "pki")
	return os.MkdirAll(c.PKIDir, 0o700)
}

// tlsArgs issues a certificate for name with the given SANs into PKIDir
// and returns the daemon flags that use it (with the control planes'
// allow list when server), or --insecure-plaintext.
func (c *Cluster) tlsArgs(name string, server bool, names ...string) ([]string, error) {
	if c.Spec.InsecurePlaintext {
		return []string{"--insecure-plaintext"}, nil
	}
	f, err := c.CA.IssueFiles(c.PKIDir, name, devpki.Leaf{CommonName: name, Names: names, ValidFor: 7 * 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	args := []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
	if server {
		args = append(args, "--tls-allowed-clients", "*"+GFEIdentitySuffix)
	}
	return args, nil
}

// startBackends starts one backend process per region, serving all of the
// region's instances, and records their addresses.
func (c *Cluster) startBackends(context.Context) error {
	spec := &c.Spec
	for ri, r := range spec.Regions {
		for zi := range r.Zones {
			for i := 1; i <= r.Instances; i++ {
				c.Instances[r.Name] = append(c.Instances[r.Name], spec.Addr(ri, zi, i))
			}
		}
		if spec.BackendAdmin {
			c.BackendAdmin[r.Name] = spec.BackendAdminAddr(ri)
		}
		bin, args := c.opts.command("backend-"+r.Name, c.Bins["testbackend"], spec.backendArgs(ri))
		p, err := proc.Start("backend-"+r.Name, bin, proc.Options{Tee: c.opts.Tee}, args...)
		if err != nil {
			return err
		}
		c.Backends = append(c.Backends, p)
	}
	return nil
}

// waitBackends waits until every instance listens: through its backend
// process's admin address when there is one, else each instance's
// /healthz.
func (c *Cluster) waitBackends(ctx context.Context) error {
	for region, addrs := range c.Instances {
		if a, ok := c.BackendAdmin[region]; ok {
			// Any protocol: the process admin answers once every instance
			// listens.
			if err := c.waitHTTP(ctx, 20*time.Second, "http://"+a+"/admin/stats"); err != nil {
				return err
			}
			continue
		}
		for _, a := range addrs {
			if err := c.waitHTTP(ctx, 20*time.Second, "http://"+a+"/healthz"); err != nil {
				return err
			}
		}
	}
	return nil
}

// RedisAddr returns the address of the Spec.Redis server.
func (s *Spec) RedisAddr() string { return s.ip(0, 100) + ":6379" }

// startRedis starts the redis-server of Spec.Redis.
func (c *Cluster) startRedis(ctx context.Context) error {
	if !c.Spec.Redis {
		return nil
	}
	var err error
	c.Redis, err = redisserver.Start(ctx, redisserver.Options{Addr: c.Spec.RedisAddr(), Dir: filepath.Join(c.Dir, "redis"), Tee: c.opts.Tee})
	return err
}

// gossipSeeds returns the control planes' gossip addresses, which every
// node joins.
func (s *Spec) gossipSeeds() []string {
	var seeds []string
	for k := 1; k <= s.ControlPlanes; k++ {
		seeds = append(seeds, s.ip(0, k)+":7946")
	}
	return seeds
}

// startControlPlanes starts Spec.ControlPlanes control planes, cp-1 on,
// and records their names, arguments and addresses for StartControlPlane.
func (c *Cluster) startControlPlanes(context.Context) error {
	seeds := c.Spec.gossipSeeds()
	var replicas []string
	for k := 1; k <= c.Spec.ControlPlanes; k++ {
		replicas = append(replicas, fmt.Sprintf("cp-%d", k))
	}
	for k := 1; k <= c.Spec.ControlPlanes; k++ {
		ip := c.Spec.ip(0, k)
		name := fmt.Sprintf("cp-%d", k)
		args := []string{
			"--config", c.ConfigPath, "--node", name, "--listen", ip + ":7000", "--admin", ip + ":7100",
			"--gossip-addr", ip + ":7946", "--join", strings.Join(seeds, ","), "--log-format", "json",
			"--gossip-key-file", c.GossipKeyFile, "--replicas", strings.Join(replicas, ","),
		}
		tls, err := c.tlsArgs(name, true, ip, name+".cp.spillway.internal")
		if err != nil {
			return err
		}
		args = append(args, tls...)
		if c.Spec.Redis {
			args = append(args, "--quota-redis", c.Spec.RedisAddr())
		}
		for _, a := range c.Spec.CPArgs {
			args = append(args, strings.ReplaceAll(a, "{ip}", ip))
		}
		c.cpArgs = append(c.cpArgs, args)
		c.cpNames = append(c.cpNames, name)
		c.CPAddrs = append(c.CPAddrs, ip+":7000")
		c.CPs = append(c.CPs, nil)
		if err := c.StartControlPlane(k - 1); err != nil {
			return err
		}
	}
	return nil
}

// waitControlPlanes waits until every control plane is ready.
func (c *Cluster) waitControlPlanes(ctx context.Context) error {
	for k := range c.CPs {
		if err := c.waitHTTP(ctx, 20*time.Second, c.Spec.ControlPlaneAdmin(k)+"/readyz"); err != nil {
			return err
		}
	}
	return nil
}

// startGFEs starts every site's gfes, in site order.
func (c *Cluster) startGFEs(context.Context) error {
	seeds := c.Spec.gossipSeeds()
	for si, s := range c.Spec.Sites {
		for g := 1; g <= s.GFEs; g++ {
			gf, err := c.newGFE(si, g, seeds)
			if err != nil {
				return err
			}
			c.GFEs = append(c.GFEs, gf)
			if err := c.StartGFE(gf); err != nil {
				return err
			}
		}
	}
	return nil
}

// newGFE returns gfe g (from 1) of site si, with the arguments that
// connect it to the control planes (with its certificate) and join it to
// the gossip seeds.
func (c *Cluster) newGFE(si, g int, seeds []string) (*GFE, error) {
	spec, s := &c.Spec, c.Spec.Sites[si]
	ip := spec.ip(si+1, g)
	gf := &GFE{
		Name: fmt.Sprintf("gfe-%s-%d", s.Name, g), Site: s.Name,
		URL: "http://" + ip + ":8080", Admin: "http://" + ip + ":9090", SourceIP: ip,
	}
	cps := c.CPAddrs
	if spec.PinControlPlanes {
		cps = cps[len(c.GFEs)%len(cps):][:1]
	}
	gf.args = []string{
		"--node", gf.Name, "--site", s.Name, "--listen", ip + ":8080", "--admin", ip + ":9090",
		"--source-ip", ip, "--controlplanes", strings.Join(cps, ","),
		"--gossip-addr", ip + ":7946", "--join", strings.Join(seeds, ","), "--gossip-key-file", c.GossipKeyFile,
		"--plan-interval", spec.PlanInterval.String(), "--rtt-interval", spec.RTTInterval.String(),
		"--damping", fmt.Sprint(spec.Damping), "--log-format", "json",
	}
	tls, err := c.tlsArgs(gf.Name, false, gf.Name+GFEIdentitySuffix)
	if err != nil {
		return nil, err
	}
	gf.args = append(gf.args, tls...)
	gf.args = append(gf.args, spec.GFEArgs...)
	if spec.NoFastPath {
		gf.args = append(gf.args, "--fast-path=false")
	}
	return gf, nil
}

// waitGFEs waits until every gfe is ready: it can serve.
func (c *Cluster) waitGFEs(ctx context.Context) error {
	for _, gf := range c.GFEs {
		if err := c.waitHTTP(ctx, 30*time.Second, gf.Admin+"/readyz"); err != nil {
			return err
		}
	}
	return nil
}

// waitConverged waits until every gfe has every instance's first health
// verdict and an RTT to every region: what a started deployment has
// beyond ready.
func (c *Cluster) waitConverged(ctx context.Context) error {
	for _, gf := range c.GFEs {
		err := WaitFor(ctx, 30*time.Second, func() (bool, error) { return c.converged(ctx, gf) })
		if err != nil {
			return err
		}
	}
	return nil
}

// converged reports whether gf has services, sees all of their groups'
// instances healthy and has measured the RTT of every region; the error
// says what it lacks.
func (c *Cluster) converged(ctx context.Context, gf *GFE) (bool, error) {
	st, err := c.Status(ctx, gf)
	if err != nil {
		return false, err
	}
	for _, s := range st.Services {
		for _, g := range s.Groups {
			if g.Healthy != g.Instances {
				return false, fmt.Errorf("%s sees group %s with %d of %d healthy", gf.Name, g.Name, g.Healthy, g.Instances)
			}
		}
	}
	if len(st.RTTms) < len(c.Spec.Regions) {
		return false, fmt.Errorf("%s has measured the RTT of %d of %d regions", gf.Name, len(st.RTTms), len(c.Spec.Regions))
	}
	return len(st.Services) > 0, nil
}

// StartControlPlane (re)starts control plane k (from 0).
func (c *Cluster) StartControlPlane(k int) error {
	bin, args := c.opts.command(c.cpNames[k], c.Bins["controlplane"], c.cpArgs[k])
	p, err := proc.Start(c.cpNames[k], bin, proc.Options{Tee: c.opts.Tee}, args...)
	if err != nil {
		return err
	}
	c.CPs[k] = p
	return nil
}

// AddControlPlaneArgs appends args to control plane k's (from 0) command
// line, for its next StartControlPlane.
func (c *Cluster) AddControlPlaneArgs(k int, args ...string) {
	c.cpArgs[k] = append(c.cpArgs[k], args...)
}

// StartGFE (re)starts gf.
func (c *Cluster) StartGFE(gf *GFE) error {
	bin, args := c.opts.command(gf.Name, c.Bins["gfe"], gf.args)
	p, err := proc.Start(gf.Name, bin, proc.Options{Tee: c.opts.Tee}, args...)
	if err != nil {
		return err
	}
	gf.Proc = p
	return nil
}

// Stop stops every process: gfes, control planes, then backends.
func (c *Cluster) Stop() {
	for _, g := range c.GFEs {
		if g.Proc != nil {
			g.Proc.Stop(5 * time.Second)
		}
	}
	for _, p := range c.CPs {
		if p != nil {
			p.Stop(5 * time.Second)
		}
	}
	for _, p := range c.Backends {
		p.Stop(5 * time.Second)
	}
	if c.Redis != nil {
		c.Redis.Stop()
	}
}

// Interrupt sends SIGINT to every process (the demo's Ctrl-C).
func (c *Cluster) Interrupt() {
	for _, g := range c.GFEs {
		if g.Proc != nil {
			g.Proc.Signal(syscall.SIGINT)
		}
	}
}

// GFE returns the first gfe of site, or nil if the site has none.
func (c *Cluster) GFE(site string) *GFE {
	for _, g := range c.GFEs {
		if g.Site == site {
			return g
		}
	}
	return nil
}

// Drive sends rates[site] requests/s to the first gfe of every site named in
// rates, all sites at once and open loop, for d, and returns each site's
// result. Requests due in the first warmup of d are sent but not recorded
// (loadgen.Config.Warmup). Each site's requests come from 16 client
// addresses of its /24, from 127.N.s.100, kept alive.
func (c *Cluster) Drive(ctx context.Context, rates map[string]float64, warmup, d time.Duration) (map[string]*loadgen.Result, error) {
	return c.drive(ctx, rates, func(_ string, cfg *loadgen.Config) {
		cfg.Duration, cfg.Warmup = d, warmup
	})
}

// Load is load started by StartLoad. Each site's Result.Start is when its
// generator started; its Record.At count from there.
type Load struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    map[string]*loadgen.Result
	err    error
}

// StartLoad sends rates[site] requests/s to the first gfe of every site
// named in rates, as Drive does, until Stop (or for at most 10 minutes),
// recording every request, so that a test can wait for a condition under
// load and then measure a window of it (loadgen.Result.Window).
func (c *Cluster) StartLoad(rates map[string]float64) *Load {
	return c.StartLoadTo(rates, nil)
}

// StartLoadTo is StartLoad with each site's load sent to url(site) (a
// host name that resolves to several gfes, say) instead of to its first
// gfe; a nil url is StartLoad.
func (c *Cluster) StartLoadTo(rates map[string]float64, url func(site string) string) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.res, l.err = c.drive(ctx, rates, func(site string, cfg *loadgen.Config) {
			cfg.Duration, cfg.Records = 10*time.Minute, true
			if url != nil {
				cfg.URL = url(site)
			}
		})
	}()
	return l
}

// Stop ends the load, waits for outstanding requests and returns each
// site's result.
func (l *Load) Stop() (map[string]*loadgen.Result, error) {
	l.cancel()
	<-l.done
	return l.res, l.err
}

// drive runs one generator per site in rates with the config set(site, cfg)
// finishes, in a process of its own when the cluster has the loadgen
// binary (Options.Bins), and returns each site's result.
func (c *Cluster) drive(ctx context.Context, rates map[string]float64, set func(site string, cfg *loadgen.Config)) (map[string]*loadgen.Result, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  = map[string]*loadgen.Result{}
		errs []error
	)
	for si, s := range c.Spec.Sites {
		rate, gf := rates[s.Name], c.GFE(s.Name)
		if rate <= 0 || gf == nil {
			continue
		}
		cfg := loadgen.Config{
			URL: gf.URL + "/", Rate: rate,
			Sources: loadgen.Sources(c.Spec.ClientIP(si), 16), Timeout: 5 * time.Second,
		}
		set(s.Name, &cfg)
		wg.Go(func() {
			res, err := c.RunLoadAt(ctx, s.Name, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("load at %s: %w", s.Name, err))
				return
			}
			out[s.Name] = res
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// RunLoad runs one load generator: in a process of its own
// (loadgen.Exec) when the cluster has the loadgen binary, else in this
// process (loadgen.Run).
func (c *Cluster) RunLoad(ctx context.Context, cfg loadgen.Config) (*loadgen.Result, error) {
	return c.RunLoadAt(ctx, "", cfg)
}

// RunLoadAt runs one load generator as RunLoad does, named "loadgen-"+site
// for Options.Wrap: with a wrapper, it runs where the wrapper puts it (the
// lab's client host of the site), and it needs the loadgen binary.
func (c *Cluster) RunLoadAt(ctx context.Context, site string, cfg loadgen.Config) (*loadgen.Result, error) {
	bin := c.Bins["loadgen"]
	if bin == "" {
		if c.opts.Wrap != nil {
			return nil, errors.New("topology: RunLoadAt with Options.Wrap needs the loadgen binary")
		}
		return loadgen.Run(ctx, cfg)
	}
	bin, args := c.opts.command("loadgen-"+site, bin, nil)
	return loadgen.Exec(ctx, bin, cfg, args...)
}

// SetHealthy makes every instance in addrs pass or fail its health checks.
func SetHealthy(ctx context.Context, healthy bool, addrs ...string) error {
	for _, a := range addrs {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s/admin/health?healthy=%t", a, healthy), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("set health of %s: %w", a, err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("set health of %s: status %d", a, resp.StatusCode)
		}
	}
	return nil
}

// Status fetches a gfe's /status with http.DefaultClient.
func Status(ctx context.Context, gf *GFE) (*status.Status, error) {
	return StatusWith(ctx, http.DefaultClient, gf)
}

// Client returns the HTTP client the cluster's processes are reached with
// (Options.Client, or http.DefaultClient).
func (c *Cluster) Client() *http.Client { return c.opts.client() }

// Status fetches a gfe's /status with Options.Client.
func (c *Cluster) Status(ctx context.Context, gf *GFE) (*status.Status, error) {
	return StatusWith(ctx, c.opts.client(), gf)
}

// StatusWith fetches a gfe's /status with client.
func StatusWith(ctx context.Context, client *http.Client, gf *GFE) (*status.Status, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gf.Admin+"/status", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode %s/status: %w", gf.Admin, err)
	}
	return &st, nil
}

// WaitFor polls cond every 100ms until it returns true or the timeout
// passes; it returns the last error cond gave.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %v (last: %v)", timeout, last)
		case <-t.C:
		}
	}
}

// waitHTTP polls url with Options.Client until it answers 200, for at
// most d.
func (c *Cluster) waitHTTP(ctx context.Context, d time.Duration, url string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if c.opts.Client == nil {
		return proc.WaitHTTP(ctx, url)
	}
	return WaitFor(ctx, d, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.opts.Client.Do(req)
		if err != nil {
			return false, fmt.Errorf("waiting for %s: %w", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("waiting for %s: status %d", url, resp.StatusCode)
		}
		return true, nil
	})
}
