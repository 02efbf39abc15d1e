package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Config describes a lab. The zero value with StateDir set is the
// documented lab.
type Config struct {
	// Prefix starts the name of every namespace the lab makes, so that
	// Clean finds what a crashed run left. Default "spl-".
	Prefix string
	// Network is the /16 every host's address is in; it exists only inside
	// the lab's namespaces. Default 10.77.0.0/16.
	Network netip.Prefix
	// StateDir holds the binaries (when Bins is nil), the config, the
	// certificates, the gossip key and the pid file. Required; Up empties
	// it of the last run's pid file only.
	StateDir string
	// Bins are prebuilt binaries by name (topology.Binaries, loadgen
	// included). Nil: Up builds them into StateDir/bin.
	Bins map[string]string
	// Tee receives every process's output, each line prefixed by its
	// name. Nil keeps it in memory only.
	Tee io.Writer
	// Spec, when set, is the deployment Up runs instead of Spec(Network)
	// (lbbench --lab sets its policy and capacities); its Network is set
	// to Network, and its client addresses beyond ClientAddrs per site
	// do not exist.
	Spec *topology.Spec
}

// DefaultNetwork is the lab's network when Config.Network is not set.
var DefaultNetwork = netip.MustParsePrefix("10.77.0.0/16")

// ClientAddrs is the number of addresses of each client host, from
// topology.Spec.ClientIP.
const ClientAddrs = 64

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = "spl-"
	}
	if !c.Network.IsValid() {
		c.Network = DefaultNetwork
	}
}

// Host is one network namespace of the lab: a machine with one interface,
// eth0, plugged into the switch.
type Host struct {
	// Name is the host's name in the lab ("gfe-nyc"); NS is its
	// namespace, Prefix+Name.
	Name, NS string
	// Addrs are eth0's addresses, each in Config.Network.
	Addrs []netip.Addr
	// port is eth0's peer on the switch's bridge.
	port string
}

// Lab is a running lab: its hosts and the deployment in them. Its fields
// are set by Up and changed only by AddHost; its methods may be called
// concurrently except AddHost.
type Lab struct {
	Cfg     Config
	Hosts   []*Host
	Cluster *topology.Cluster
	// Client reaches every host's addresses from the switch namespace,
	// whose bridge has the address .255.254 of Config.Network.
	Client *http.Client
	// SwitchNS is the namespace that holds the bridge.
	SwitchNS string
}

// PerTryTimeout is the lab route's per_try_timeout: an idempotent request
// without response headers by then (its backend host vanished with it in
// flight) is retried in another region. Ten times the longest emulated RTT
// (90 ms), so that a busy machine's slow answer is rarely abandoned, and an
// abandoned one is retried anyway.
const PerTryTimeout = time.Second

// Spec returns the deployment the lab runs: the demo's regions and sites
// (8 ms from each site to its own region, 35–90 ms to the others, emulated
// by the test backends) with two control-plane replicas, in network, and a
// route with per_try_timeout PerTryTimeout.
func Spec(network netip.Prefix) topology.Spec {
	s := topology.Demo(0)
	s.Network = network
	s.ControlPlanes = 2
	s.EditConfig = func(yaml string) string {
		return strings.Replace(yaml, "service: web}", fmt.Sprintf("service: web, per_try_timeout: %v}", PerTryTimeout), 1)
	}
	return s
}

// hostsOf returns the hosts of spec: cp-1…, gfe-<site>, backend-<region>
// and client-<site> (ClientAddrs client addresses each).
func hostsOf(spec *topology.Spec) []*Host {
	var hs []*Host
	add := func(name string, addrs ...netip.Addr) {
		hs = append(hs, &Host{Name: name, Addrs: addrs})
	}
	for k := range spec.ControlPlanes {
		add(fmt.Sprintf("cp-%d", k+1), netip.MustParseAddr(spec.ControlPlaneIP(k)))
	}
	for si, s := range spec.Sites {
		add("gfe-"+s.Name, netip.MustParseAddr(spec.GFEIP(si, 1)))
	}
	for ri, r := range spec.Regions {
		add("backend-"+r.Name, netip.MustParseAddr(spec.BackendIP(ri)))
	}
	for si, s := range spec.Sites {
		var addrs []netip.Addr
		for a, n := spec.ClientIP(si), 0; n < ClientAddrs; a, n = a.Next(), n+1 {
			addrs = append(addrs, a)
		}
		add("client-"+s.Name, addrs...)
	}
	return hs
}

// hostOf returns the lab host a topology process runs on: gfe-<site>-<g>
// on gfe-<site>, loadgen-<site> on client-<site>, the others on the host
// of their own name.
func hostOf(process string) string {
	switch {
	case strings.HasPrefix(process, "gfe-"):
		return process[:strings.LastIndexByte(process, '-')]
	case strings.HasPrefix(process, "loadgen-"):
		return "client-" + strings.TrimPrefix(process, "loadgen-")
	}
	return process
}

// Up cleans what an earlier run left (Clean), makes the switch and the
// hosts, starts the deployment in them with mutual TLS and gossip
// encryption, and returns once every gfe has a plan, every instance's
// health and every region's RTT. On error it tears down what it made.
func Up(ctx context.Context, cfg Config) (l *Lab, err error) {
	cfg.defaults()
	if cfg.StateDir == "" {
		return nil, errors.New("lab: Config.StateDir is required")
	}
	spec := Spec(cfg.Network)
	if cfg.Spec != nil {
		spec = *cfg.Spec
		spec.Network = cfg.Network
		spec.ControlPlanes = max(spec.ControlPlanes, 1) // topology's default: each needs a host
	}
	made, err := UpHosts(ctx, cfg, hostsOf(&spec))
	if err != nil {
		return nil, err
	}
	l = made
	defer func() {
		if err != nil {
			made.Down(context.WithoutCancel(ctx)) // l is nil by then
		}
	}()
	for si, s := range spec.Sites {
		if err := l.SetDNS(s.Name, dnsOrder(&spec, si)...); err != nil {
			return nil, err
		}
	}
	bins := cfg.Bins
	if bins == nil {
		if bins, err = proc.Build(ctx, filepath.Join(cfg.StateDir, "bin"), false, topology.Binaries...); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(cfg.StateDir, "deploy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	l.Cluster, err = topology.Start(ctx, spec, topology.Options{
		Dir: dir, Bins: bins, Tee: cfg.Tee, Client: l.Client,
		Wrap: func(name, bin string, args []string) (string, []string) {
			return "ip", append([]string{"netns", "exec", cfg.Prefix + hostOf(name), bin}, args...)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lab: start the deployment: %w", err)
	}
	return l, l.writePids()
}

// Starter returns start, which brings a lab of cfg up running the
// deployment it is given (Config.Spec) and returns its cluster — the
// realbench.Options.Start of lbbench --lab — and down, which tears that
// lab down (or cleans after a failed start). start may be called once.
func Starter(cfg Config) (start func(ctx context.Context, spec topology.Spec) (*topology.Cluster, error), down func() error) {
	var l *Lab
	start = func(ctx context.Context, spec topology.Spec) (*topology.Cluster, error) {
		cfg.Spec = &spec
		var err error
		if l, err = Up(ctx, cfg); err != nil {
			return nil, err
		}
		return l.Cluster, nil
	}
	down = func() error {
		if l != nil {
			return l.Down(context.Background())
		}
		return Clean(context.Background(), cfg)
	}
	return start, down
}

// UpHosts cleans what an earlier lab with cfg left (Clean), then makes the
// switch and hosts (their Name and Addrs set; Up's are the deployment's),
// with nothing running in them. On error it removes what it made.
func UpHosts(ctx context.Context, cfg Config, hosts []*Host) (l *Lab, err error) {
	cfg.defaults()
	if err := RequireIP(); err != nil {
		return nil, err
	}
	if err := Clean(ctx, cfg); err != nil {
		return nil, err
	}
	l = &Lab{Cfg: cfg, Hosts: hosts, SwitchNS: cfg.Prefix + "switch"}
	for i, h := range hosts {
		h.NS, h.port = cfg.Prefix+h.Name, fmt.Sprintf("p%d", i)
	}
	l.Client = &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{DialContext: Dialer(l.SwitchNS), MaxIdleConnsPerHost: 4},
	}
	if err := l.makeNetwork(ctx); err != nil {
		l.Down(context.WithoutCancel(ctx))
		return nil, err
	}
	return l, nil
}

// makeNetwork makes the switch namespace with bridge br0 (address
// .255.254/16) and every host, each with eth0 plugged into the bridge.
// Nothing is added to the namespace the lab runs in.
func (l *Lab) makeNetwork(ctx context.Context) error {
	bits := l.Cfg.Network.Bits()
	sw := l.SwitchNS
	a := l.Cfg.Network.Masked().Addr().As4()
	a[2], a[3] = 255, 254
	steps := [][]string{
		{"netns", "add", sw},
		{"-n", sw, "link", "set", "lo", "up"},
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "addr", "add", fmt.Sprintf("%s/%d", netip.AddrFrom4(a), bits), "dev", "br0"},
		{"-n", sw, "link", "set", "br0", "up"},
	}
	for _, st := range steps {
		if err := ip(ctx, st...); err != nil {
			return err
		}
	}
	for _, h := range l.Hosts {
		if err := l.plug(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// plug makes h's namespace and its eth0, plugged into the bridge.
func (l *Lab) plug(ctx context.Context, h *Host) error {
	sw := l.SwitchNS
	steps := [][]string{
		{"netns", "add", h.NS},
		{"-n", h.NS, "link", "set", "lo", "up"},
		// Made in the switch namespace, with its peer moved straight into
		// the host's: neither end ever exists in ours.
		{"-n", sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"-n", sw, "link", "set", h.port, "master", "br0", "up"},
	}
	for _, a := range h.Addrs {
		steps = append(steps, []string{"-n", h.NS, "addr", "add", fmt.Sprintf("%s/%d", a, l.Cfg.Network.Bits()), "dev", "eth0"})
	}
	steps = append(steps, []string{"-n", h.NS, "link", "set", "eth0", "up"})
	for _, st := range steps {
		if err := ip(ctx, st...); err != nil {
			return fmt.Errorf("lab: host %s: %w", h.Name, err)
		}
	}
	return nil
}

// Name is the name clients use for the service: on client host
// client-<site> it resolves to every gfe, its own site's first (GeoDNS
// with every site as a fallback), through the host's own /etc/hosts —
// /etc/netns/<namespace>/hosts, which ip netns exec mounts over /etc/hosts
// for the processes it starts there. A client whose connection to the
// first address is refused tries the next, as browsers and Go's dialer do.
const Name = "web.spillway.lab"

// dnsOrder returns the gfe addresses Name resolves to at site si: its own
// gfes first, then the other sites' in spec order.
func dnsOrder(spec *topology.Spec, si int) []string {
	var out []string
	for k := range spec.Sites {
		j := (si + k) % len(spec.Sites)
		for g := 1; g <= max(1, spec.Sites[j].GFEs); g++ {
			out = append(out, spec.GFEIP(j, g))
		}
	}
	return out
}

// DNS returns the addresses Name resolves to on client host client-<site>
// when every gfe is in the name (what Up sets).
func (l *Lab) DNS(site string) []string {
	for si, s := range l.Cluster.Spec.Sites {
		if s.Name == site {
			return dnsOrder(&l.Cluster.Spec, si)
		}
	}
	return nil
}

// SetDNS makes Name resolve to addrs, in order, on client host
// client-<site>: an operator's DNS change (taking a gfe out of the name,
// putting it back). The file is rewritten in place, so processes already
// running there see the change; Go's resolver re-reads it within 5 s (its
// /etc/hosts cache), the lab's DNS TTL.
func (l *Lab) SetDNS(site string, addrs ...string) error {
	dir := filepath.Join("/etc/netns", l.Cfg.Prefix+"client-"+site)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: dns of %s: %w", site, err)
	}
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "%s %s\n", a, Name)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("lab: dns of %s: %w", site, err)
	}
	return nil
}

// AddHost makes one more host named name with addrs (each in
// Config.Network), plugged into the switch: tests start intruders there.
// Down and Clean remove it with the others.
func (l *Lab) AddHost(ctx context.Context, name string, addrs ...netip.Addr) (*Host, error) {
	h := &Host{Name: name, NS: l.Cfg.Prefix + name, Addrs: addrs, port: fmt.Sprintf("p%d", len(l.Hosts))}
	l.Hosts = append(l.Hosts, h)
	return h, l.plug(ctx, h)
}

// Host returns the host named name, or nil.
func (l *Lab) Host(name string) *Host {
	for _, h := range l.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// SetLink takes host name's eth0 down or up: to the rest of the lab the
// whole host is gone (or back), while its processes keep running.
func (l *Lab) SetLink(ctx context.Context, name string, up bool) error {
	h := l.Host(name)
	if h == nil {
		return fmt.Errorf("lab: no host %q", name)
	}
	state := "down"
	if up {
		state = "up"
	}
	return ip(ctx, "-n", h.NS, "link", "set", "eth0", state)
}

// Partition cuts host name off from peers (on) or heals the cut (!on) with
// blackhole routes in the host's namespace: what it sends to them is
// dropped, so neither side hears the other, while the rest of the lab
// (clients, backends) still reaches it. The kernel has no netem and the
// lab needs no firewall.
func (l *Lab) Partition(ctx context.Context, name string, on bool, peers ...netip.Prefix) error {
	h := l.Host(name)
	if h == nil {
		return fmt.Errorf("lab: no host %q", name)
	}
	op := "del"
	if on {
		op = "add"
	}
	for _, p := range peers {
		if err := ip(ctx, "-n", h.NS, "route", op, "blackhole", p.String()); err != nil {
			return fmt.Errorf("lab: partition %s: %w", name, err)
		}
	}
	return nil
}

// Start runs bin with args on host name as a child process called process.
func (l *Lab) Start(name, process, bin string, args ...string) (*proc.Proc, error) {
	h := l.Host(name)
	if h == nil {
		return nil, fmt.Errorf("lab: no host %q", name)
	}
	return proc.Start(process, "ip", proc.Options{Tee: l.Cfg.Tee}, append([]string{"netns", "exec", h.NS, bin}, args...)...)
}

// RestartGFE restarts the gfe of site as `systemctl restart spillway-gfe`
// does: SIGTERM — the gfe refuses new connections at once, finishes the
// requests in flight within its drain timeout, closes its idle keep-alive
// connections, and exits — then the same command line again. It returns
// once the new process is ready and has measured every region's RTT, with
// how long the old one took to exit (drained) and the new one to be ready.
func (l *Lab) RestartGFE(ctx context.Context, site string) (drained, ready time.Duration, err error) {
	c := l.Cluster
	gf := c.GFE(site)
	if gf == nil {
		return 0, 0, fmt.Errorf("lab: no gfe at %q", site)
	}
	start := time.Now()
	if err := gf.Proc.Stop(30 * time.Second); err != nil {
		return 0, 0, fmt.Errorf("lab: stop %s: %w", gf.Name, err)
	}
	drained = time.Since(start)
	start = time.Now()
	if err := c.StartGFE(gf); err != nil {
		return drained, 0, fmt.Errorf("lab: start %s: %w", gf.Name, err)
	}
	if err := l.writePids(); err != nil {
		return drained, 0, err
	}
	err = topology.WaitFor(ctx, 60*time.Second, func() (bool, error) {
		st, err := c.Status(ctx, gf)
		if err != nil {
			return false, err
		}
		return st.Ready && len(st.RTTms) == len(c.Spec.Regions),
			fmt.Errorf("%s: ready=%t, RTT of %d regions", gf.Name, st.Ready, len(st.RTTms))
	})
	if err != nil {
		return drained, 0, fmt.Errorf("lab: restarted %s: %w", gf.Name, err)
	}
	return drained, time.Since(start), nil
}

// pidFile is where Up records the processes it started, for Clean.
func pidFile(stateDir string) string { return filepath.Join(stateDir, "pids") }

// writePids records every process of the deployment as "pid exe" lines.
func (l *Lab) writePids() error {
	var b strings.Builder
	c := l.Cluster
	var ps []*proc.Proc
	ps = append(ps, c.Backends...)
	ps = append(ps, c.CPs...)
	for _, g := range c.GFEs {
		ps = append(ps, g.Proc)
	}
	for _, p := range ps {
		if p == nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid()))
		if err != nil {
			return fmt.Errorf("lab: record pid of %s: %w", p.Name, err)
		}
		fmt.Fprintf(&b, "%d %s\n", p.Pid(), exe)
	}
	if err := os.WriteFile(pidFile(l.Cfg.StateDir), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// Stop stops the deployment's processes and leaves the namespaces.
func (l *Lab) Stop() {
	if l.Cluster != nil {
		l.Cluster.Stop()
	}
	if l.Client != nil {
		l.Client.CloseIdleConnections()
	}
}

// Down stops the deployment's processes and removes every namespace and
// link of the lab (Clean). It returns the first error; it always tries
// everything.
func (l *Lab) Down(ctx context.Context) error {
	l.Stop()
	return Clean(ctx, l.Cfg)
}

// Clean removes what a lab with cfg left behind, even after a crash: it
// asks a running `lab up` of the same state directory to tear its lab
// down itself (StopOwner) and waits for it, then it kills the processes
// in its pid file (those whose executable is still the
// recorded one), then every process in a namespace whose name starts with
// Prefix, and deletes those namespaces; their veth links go with them.
// Afterwards no namespace with the prefix exists.
func Clean(ctx context.Context, cfg Config) error {
	cfg.defaults()
	var errs []error
	if cfg.StateDir != "" {
		sctx, cancel := context.WithTimeout(ctx, ownerStopTimeout)
		_, err := StopOwner(sctx, cfg.StateDir)
		cancel()
		errs = append(errs, err, killRecorded(pidFile(cfg.StateDir)))
	}
	nss, err := Namespaces(cfg.Prefix)
	if err != nil {
		return err
	}
	for _, ns := range nss {
		if err := killNamespace(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	if left, _ := Namespaces(cfg.Prefix); len(left) > 0 {
		errs = append(errs, fmt.Errorf("lab: namespaces left after clean: %s", strings.Join(left, " ")))
	}
	// The hosts' own /etc files (SetDNS).
	etc, _ := filepath.Glob(filepath.Join("/etc/netns", cfg.Prefix+"*"))
	for _, d := range etc {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("lab: %w", err))
		}
	}
	return errors.Join(errs...)
}

// killRecorded kills the processes listed in file that still run the
// recorded executable, and removes file.
func killRecorded(file string) error {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pidStr, exe, ok := strings.Cut(sc.Text(), " ")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil {
			continue
		}
		if cur, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && cur == exe {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.Remove(file); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// Describe writes the lab's hosts and the URLs to look at, with the commands
// that reach them.
func (l *Lab) Describe(w io.Writer) {
	c := l.Cluster
	fmt.Fprintf(w, "hosts (network namespaces, %s; switch %s, bridge br0):\n", l.Cfg.Network, l.SwitchNS)
	for _, h := range l.Hosts {
		addrs := fmt.Sprint(h.Addrs[0])
		if len(h.Addrs) > 1 {
			addrs += fmt.Sprintf(" … %s", h.Addrs[len(h.Addrs)-1])
		}
		fmt.Fprintf(w, "  %-20s %s\n", h.NS, addrs)
	}
	fmt.Fprintln(w, "gfes (proxy, admin):")
	for _, g := range c.GFEs {
		fmt.Fprintf(w, "  %-14s %s/   %s/status\n", g.Name, g.URL, g.Admin)
	}
	fmt.Fprintln(w, "control planes (admin):")
	for k := range c.CPs {
		fmt.Fprintf(w, "  cp-%d           http://%s:7100/status\n", k+1, c.Spec.ControlPlaneIP(k))
	}
	fmt.Fprintln(w, "try:")
	if len(c.GFEs) > 0 {
		g := c.GFEs[0]
		fmt.Fprintf(w, "  ip netns exec %sclient-%s curl -si %s/ | grep X-Spillway\n", l.Cfg.Prefix, g.Site, g.URL)
		fmt.Fprintf(w, "  ip netns exec %sclient-%s curl -si http://%s:8080/ | grep X-Spillway   # by name: every gfe, %s's first\n", l.Cfg.Prefix, g.Site, Name, g.Site)
		fmt.Fprintf(w, "  ip netns exec %s curl -s %s/status\n", l.SwitchNS, g.Admin)
	}
	fmt.Fprintf(w, "  ip -n %sbackend-us-east link set eth0 down   # a whole backend host fails\n", l.Cfg.Prefix)
	fmt.Fprintf(w, "certificates and gossip key: %s, %s\n", c.PKIDir, c.GossipKeyFile)
}

// Status writes what runs in the lab of cfg: each namespace and the number
// of processes in it, and, when the lab's gfes answer, each one's node,
// readiness, config version, gossip members and RTTs.
func Status(ctx context.Context, cfg Config, w io.Writer) error {
	cfg.defaults()
	nss, err := Namespaces(cfg.Prefix)
	if err != nil {
		return err
	}
	if len(nss) == 0 {
		fmt.Fprintf(w, "no lab: no namespace starts with %q\n", cfg.Prefix)
		return nil
	}
	slices.Sort(nss)
	for _, ns := range nss {
		pids, err := nsPids(ctx, ns)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%-22s %d processes\n", ns, len(pids))
	}
	spec := Spec(cfg.Network)
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: Dialer(cfg.Prefix + "switch")}}
	defer cl.CloseIdleConnections()
	for si, s := range spec.Sites {
		gf := &topology.GFE{Name: "gfe-" + s.Name + "-1", Admin: "http://" + spec.GFEIP(si, 1) + ":9090"}
		st, err := topology.StatusWith(ctx, cl, gf)
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", gf.Name, err)
			continue
		}
		fmt.Fprintf(w, "%s: ready=%t config=%s members=%d rtt_ms=%v\n", st.Node, st.Ready, st.ConfigVersion, len(st.Members), st.RTTms)
	}
	return nil
}

// Wait returns nil when ctx ends, or an error naming the first of the
// deployment's processes to exit on its own (a crash, or `lab down` from
// another terminal).
func (l *Lab) Wait(ctx context.Context) error {
	c := l.Cluster
	exited := make(chan *proc.Proc, 1)
	watch := func(p *proc.Proc) {
		if p == nil {
			return
		}
		go func() {
			select {
			case <-p.Done():
				select {
				case exited <- p:
				default:
				}
			case <-ctx.Done():
			}
		}()
	}
	for _, p := range c.Backends {
		watch(p)
	}
	for _, p := range c.CPs {
		watch(p)
	}
	for _, g := range c.GFEs {
		watch(g.Proc)
	}
	select {
	case <-ctx.Done():
		return nil
	case p := <-exited:
		return fmt.Errorf("lab: %s exited: %v", p.Name, p.Err())
	}
}
