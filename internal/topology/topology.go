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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/redisserver"
)

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
		if r.Instances == 0 {
			continue // an autoscaled region that starts empty
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
		for _, a := range c.Spec.autoscaleArgs() {
			args = append(args, strings.ReplaceAll(a, "{{testbackend}}", c.Bins["testbackend"]))
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
	// A region without instances (autoscaled from zero) has nothing to
	// measure.
	regions := 0
	for _, r := range c.Spec.Regions {
		if r.Instances > 0 {
			regions++
		}
	}
	if len(st.RTTms) < regions {
		return false, fmt.Errorf("%s has measured the RTT of %d of %d regions", gf.Name, len(st.RTTms), regions)
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
