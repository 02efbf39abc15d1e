package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/spillway-lb/spillway/internal/adminhttp"
	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/statuspage"
	"github.com/spillway-lb/spillway/internal/version"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// Component is one long-lived part of the daemon. Run blocks until ctx is
// done (then returns nil after a clean stop) or the component fails.
type Component struct {
	Name string
	Run  func(ctx context.Context) error
}

// Daemon is one control-plane replica: the config reloader, the gossip
// node, the health manager, the gRPC server and the admin HTTP server,
// wired together. New builds it and binds its listeners; Components (or
// Run) runs it. A Daemon runs once and must not be copied.
type Daemon struct {
	// Immutable after New.
	cfg        Config
	log        zerolog.Logger
	reg        *prometheus.Registry
	m          *metrics
	hub        *hub
	node       *gossip.Node
	health     *healthManager
	reloader   *reloader
	svc        *service
	quota      *quotaService
	grpcSrv    *grpc.Server
	grpcHealth *grpchealth.Server
	lis        net.Listener
	admin      *http.Server
	adminLis   net.Listener
	// xds is the xDS export, nil unless Config.XDS.Listen is set.
	xds *xdsExporter
	// pub publishes this replica's gossip state (health, xDS and
	// autoscaler parts).
	pub *statePublisher
	// autoscaler is nil unless Config.Autoscale.Provider is set.
	autoscaler *autoscaler
}

// New validates cfg, loads the configuration file (an invalid file is an
// error: a replica with no good configuration has nothing to serve), and
// binds the gRPC and admin listeners. Nothing runs until Run or the
// Components run; they release the listeners when they stop.
func New(cfg Config, opts Options) (d *Daemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("controlplane: invalid config: %w", err)
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	d = &Daemon{cfg: cfg, log: opts.Logger, reg: reg, m: newMetrics(reg), hub: newHub()}

	gcfg := cfg.Gossip
	gcfg.Name = cfg.NodeName
	// Gossip keeps the real clock and its own randomness: memberlist's
	// timers are real anyway, and its Rand is called from its own goroutine.
	// With TLS files the replica seals its states and believes only
	// sealed ones (see GossipCA).
	sealer, verifier, err := mtls.GossipSeals(cfg.TLS.Files, cfg.GossipCA, cfg.NodeName, opts.Logger.With().Str("component", "gossip").Logger())
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	d.node, err = gossip.New(gcfg, gossip.Options{Logger: opts.Logger, Sealer: sealer, Verifier: verifier})
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	reg.MustRegister(d.node.Collector("spillway_controlplane"))
	d.pub = newStatePublisher(d.node)
	d.health = newHealthManager(cfg.NodeName, cfg.Replicas, d.pub, d.hub, opts, d.m)
	appliers := []applier{
		// The one applier that may refuse a configuration (a health check
		// that cannot run); it also builds the States that snapshots are
		// made of. New ones go after it unless they can refuse a
		// configuration too.
		{name: "health", fn: d.health.ApplyConfig},
	}
	if cfg.Autoscale.Provider != "" {
		if d.autoscaler, err = newAutoscaler(cfg.Autoscale, cfg.NodeName, d.health.replicas, d.pub, opts, reg); err != nil {
			return nil, fmt.Errorf("controlplane: %w", err)
		}
		appliers = append(appliers, applier{name: "autoscaler", fn: func(l *LoadedConfig) error {
			d.autoscaler.ctrl.SetConfig(l.Config)
			return nil
		}})
	}
	d.reloader = newReloader(cfg.ConfigPath, cfg.ReloadDebounce, cfg.ReloadPoll, appliers, opts.Clock, opts.Logger, d.m)
	if _, err := d.reloader.Reload(); err != nil {
		return nil, fmt.Errorf("controlplane: initial config: %w", err)
	}
	d.svc = newService(cfg.NodeName, d.hub, opts.Clock, opts.Logger, d.m)
	reg.MustRegister(newGFECollector(d.svc.Nodes))
	if d.autoscaler != nil {
		d.svc.capacity = d.autoscaler.ctrl
	}

	// Before binding: bad TLS or token files stop the daemon with nothing
	// to release.
	creds, err := mtls.ServerCredentials(cfg.TLS, mtls.Options{
		Logger:  opts.Logger.With().Str("component", "grpc").Logger(),
		Refused: func(error) { d.m.tlsRefused.Inc() },
	})
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	admin, err := d.adminHandler()
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}

	d.lis, err = net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("controlplane: listen: %w", err)
	}
	defer func() {
		if err != nil {
			d.lis.Close()
		}
	}()
	d.adminLis, err = net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return nil, fmt.Errorf("controlplane: admin listen: %w", err)
	}
	defer func() {
		if err != nil {
			d.adminLis.Close()
		}
	}()
	if cfg.XDS.Listen != "" {
		if d.xds, err = newXDSExporter(cfg, d.hub, d.pub, opts, d.m); err != nil {
			return nil, fmt.Errorf("controlplane: %w", err)
		}
	}

	d.grpcSrv = grpc.NewServer(
		grpc.Creds(creds),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	pb.RegisterControlPlaneServer(d.grpcSrv, d.svc)
	seed := rand.Uint64()
	if opts.Rand != nil {
		seed = opts.Rand()
	}
	d.quota, err = newQuotaService(d.hub, opts.Clock, cfg.QuotaErrorRate, cfg.QuotaRedis, seed, opts.Logger, reg)
	if err != nil {
		return nil, fmt.Errorf("controlplane: quota: %w", err)
	}
	pb.RegisterQuotaServer(d.grpcSrv, d.quota)
	d.grpcHealth = grpchealth.NewServer()
	healthpb.RegisterHealthServer(d.grpcSrv, d.grpcHealth)
	d.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	if cfg.GRPCReflection {
		reflection.Register(d.grpcSrv)
	}

	d.admin = &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second}
	return d, nil
}

// Components returns the daemon's parts, for the caller to run under one
// errgroup (cmd/controlplane does; Run is the same thing). Each must run
// exactly once.
func (d *Daemon) Components() []Component {
	cs := []Component{
		{Name: "config", Run: d.reloader.Run},
		{Name: "gossip", Run: d.node.Run},
		{Name: "health", Run: d.health.Run},
		{Name: "grpc", Run: d.serveGRPC},
		{Name: "admin", Run: d.serveAdmin},
		{Name: "quota", Run: d.quota.Run},
	}
	if d.xds != nil {
		cs = append(cs, Component{Name: "xds", Run: d.xds.Run})
	}
	if d.autoscaler != nil {
		cs = append(cs, Component{Name: "autoscaler", Run: d.autoscaler.Run})
	}
	return cs
}

// Run runs every component until ctx is done or one fails, then stops them
// all. It returns the first failure, or nil after a clean stop.
func (d *Daemon) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range d.Components() {
		g.Go(func() error {
			if err := c.Run(ctx); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// Addr returns the gRPC listen address (with the chosen port).
func (d *Daemon) Addr() string { return d.lis.Addr().String() }

// XDSAddr returns the xDS listen address (with the chosen port), "" when
// the export is off.
func (d *Daemon) XDSAddr() string {
	if d.xds == nil {
		return ""
	}
	return d.xds.Addr()
}

// AdminAddr returns the admin HTTP listen address.
func (d *Daemon) AdminAddr() string { return d.adminLis.Addr().String() }

// GossipNode returns the replica's gossip node (for key rotation:
// gossip.Node.SetKeys).
func (d *Daemon) GossipNode() *gossip.Node { return d.node }

// GossipReady is closed once the gossip node listens; GossipAddr is then
// known.
func (d *Daemon) GossipReady() <-chan struct{} { return d.node.Ready() }

// GossipAddr returns the "ip:port" other nodes join this replica at, or ""
// before GossipReady.
func (d *Daemon) GossipAddr() string { return d.node.Addr() }

// State returns the State being served (nil before the health manager's
// first turn) and a channel closed when a newer one is stored.
func (d *Daemon) State() (*State, <-chan struct{}) { return d.hub.Load() }

// Node returns what this replica knows of the gfe with id.
func (d *Daemon) Node(id string) (NodeStatus, bool) { return d.svc.Node(id) }

// Nodes returns every gfe seen by this replica, sorted by id.
func (d *Daemon) Nodes() []NodeStatus { return d.svc.Nodes() }

// Ownership returns the alive control planes (sorted) and the groups this
// replica health-checks (sorted).
func (d *Daemon) Ownership() (members, owned []string) {
	v := d.health.Ownership()
	return v.Members, v.Owned
}

// Config returns the configuration being served.
func (d *Daemon) Config() *LoadedConfig { return d.reloader.Current() }

// Reload re-reads the configuration file and the secret files it names
// now (as on SIGHUP), logs the outcome as the file watcher does, and
// reports whether a new version was accepted.
func (d *Daemon) Reload() bool {
	changed, err := d.reloader.ReloadAll()
	d.reloader.logReload(changed, err)
	return changed
}

func (d *Daemon) setServing(s healthpb.HealthCheckResponse_ServingStatus) {
	d.grpcHealth.SetServingStatus("", s)
	d.grpcHealth.SetServingStatus(pb.ControlPlane_ServiceDesc.ServiceName, s)
}

// serveGRPC serves gRPC until ctx is done, turning the gRPC health status
// to SERVING once the State is Ready. On stop it ends the snapshot streams
// (UNAVAILABLE), waits up to ShutdownGrace for other calls, then closes.
func (d *Daemon) serveGRPC(ctx context.Context) error {
	errc := make(chan error, 1)
	go serveGRPC(d.grpcSrv, d.lis, errc)
	log := d.log.With().Str("component", "grpc").Logger()
	log.Info().Str("addr", d.Addr()).Msg("grpc listening")
	serving := false
	for {
		st, changed := d.hub.Load()
		if !serving && st != nil && st.Ready {
			serving = true
			d.setServing(healthpb.HealthCheckResponse_SERVING)
		}
		select {
		case <-changed:
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
			d.grpcHealth.Shutdown()
			d.svc.shutdown()
			stopped := make(chan struct{})
			go gracefulStop(d.grpcSrv, stopped)
			// Real time: this bounds real network I/O at exit.
			t := time.NewTimer(d.cfg.ShutdownGrace)
			defer t.Stop()
			select {
			case <-stopped:
			case <-t.C:
				d.grpcSrv.Stop()
				<-stopped
			}
			<-errc
			log.Info().Msg("grpc stopped")
			return nil
		}
	}
}

// serveGRPC runs srv.Serve; a named function so stacks say what it is.
func serveGRPC(srv *grpc.Server, lis net.Listener, errc chan<- error) { errc <- srv.Serve(lis) }

// gracefulStop runs srv.GracefulStop and closes done.
func gracefulStop(srv *grpc.Server, done chan<- struct{}) {
	srv.GracefulStop()
	close(done)
}

// serveAdmin serves the admin HTTP endpoints until ctx is done.
func (d *Daemon) serveAdmin(ctx context.Context) error {
	errc := make(chan error, 1)
	go serveHTTP(d.admin, d.adminLis, errc)
	d.log.Info().Str("component", "admin").Str("addr", d.AdminAddr()).Msg("admin listening")
	select {
	case err := <-errc:
		return fmt.Errorf("serve admin: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownGrace)
	defer cancel()
	if err := d.admin.Shutdown(sctx); err != nil {
		d.admin.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve admin: %w", err)
	}
	return nil
}

// serveHTTP runs srv.Serve; a named function so stacks say what it is.
func serveHTTP(srv *http.Server, lis net.Listener, errc chan<- error) { errc <- srv.Serve(lis) }

// adminHandler serves the status page at / (package statuspage),
// /metrics, /healthz, /readyz, /status and, with Config.Pprof, pprof;
// behind the admin token when Config.AdminTokenFile is set.
func (d *Daemon) adminHandler() (http.Handler, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st, _ := d.hub.Load(); st == nil || !st.Ready {
			http.Error(w, "not ready: the startup health view has not settled", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	statuspage.Mount(mux)
	mux.HandleFunc("GET /status", d.serveStatus)
	if d.cfg.Pprof {
		adminhttp.MountPprof(mux)
	}
	return adminhttp.Guard(mux, d.cfg.AdminTokenFile, d.log)
}

// statusPage is the JSON of /status.
type statusPage struct {
	Node            string           `json:"node"`
	Version         version.Info     `json:"version"` // the build of this binary
	ConfigVersion   string           `json:"config_version"`
	ConfigSource    string           `json:"config_source"`
	ConfigLoadedAt  time.Time        `json:"config_loaded_at"`
	SnapshotVersion string           `json:"snapshot_version,omitempty"`
	Ready           bool             `json:"ready"`
	ControlPlanes   []string         `json:"control_planes"`
	OwnedGroups     []string         `json:"owned_groups"`
	Health          []InstanceHealth `json:"health"`
	GFEs            []NodeStatus     `json:"gfes"`
	// LaggingGFEs names the connected gfes that refuse the current
	// snapshot (NodeStatus.Lagging), for an operator's first look during
	// a rollout; GFEs has each one's error.
	LaggingGFEs []string `json:"lagging_gfes"`
	// QuotaStore is where quota counters live: "memory" or "redis".
	QuotaStore string `json:"quota_store"`
	// Quota is every configured consumer's standing per metric in the
	// current window.
	Quota []QuotaStatus `json:"quota,omitempty"`
	// Autoscaler is every group whose autoscaler runs on this replica
	// (absent without --autoscale-provider).
	Autoscaler []controller.GroupStatus `json:"autoscaler,omitempty"`
}

func (d *Daemon) serveStatus(w http.ResponseWriter, r *http.Request) {
	cur := d.reloader.Current()
	members, owned := d.Ownership()
	p := statusPage{
		Node:           d.cfg.NodeName,
		Version:        version.Get(),
		ConfigVersion:  cur.Version,
		ConfigSource:   cur.Source,
		ConfigLoadedAt: cur.LoadedAt,
		ControlPlanes:  members,
		OwnedGroups:    owned,
		GFEs:           d.svc.Nodes(),
		LaggingGFEs:    []string{},
		QuotaStore:     d.quota.storeName,
		Quota:          d.quota.Status(r.Context(), d.quota.clock.Now()),
	}
	for _, n := range p.GFEs {
		if n.Lagging && n.Streams > 0 {
			p.LaggingGFEs = append(p.LaggingGFEs, n.ID)
		}
	}
	if d.autoscaler != nil {
		p.Autoscaler = d.autoscaler.ctrl.Status()
	}
	if st, _ := d.hub.Load(); st != nil {
		p.SnapshotVersion, p.Ready, p.Health = st.Version, st.Ready, st.Health
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(p) // a write error means the client went away
}
