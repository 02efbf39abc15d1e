package controlplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/routing"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/xdsexport"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// XDSConfig is the xDS export of the plan (package xdsexport): Envoy and
// proxyless gRPC clients at a site get the gfes' plan row of that site as
// locality weights.
type XDSConfig struct {
	// Listen is the address of the xDS gRPC listener (ADS, LDS, RDS, CDS,
	// EDS). Empty (the default) turns the export off.
	Listen string
	// AllowedClients are the identities (DNS/URI SANs or CN, "*.suffix",
	// "*"; see mtls.Allowed) of the xDS clients served. The listener uses
	// the control plane's CA, certificate and key (Config.TLS) with this
	// allow list, so that xDS clients need not pass for gfes. Required
	// with Listen unless TLS.InsecurePlaintext.
	AllowedClients []string
	// PlanInterval is how often the plan is recomputed from gossip (every
	// gfe's demand, RTTs and capacity factors) and the served state, and
	// pushed when it changed. Default 500ms, the gfe's default: the
	// export then moves with the gfes. Lower costs CPU per interval.
	PlanInterval time.Duration
	// Damping is the fraction of the way each plan moves toward the
	// planner's newest output per PlanInterval (waterfall.Damp), as the
	// gfe's --damping. Default 0.5, the gfe's default; in (0, 1].
	Damping float64
	// EnvoyListen is the host:port of the listener served to Envoy
	// clients (bound on each Envoy's host). Default "0.0.0.0:10000".
	EnvoyListen string
	// LoadReportInterval is how often xDS clients report their load (LRS,
	// xdsexport.LoadReports): every exported cluster names this server as
	// its LRS server, and the calls a client issues count as demand of its
	// site (node.locality.region), planned with the gfes' own and gossiped
	// to them, because those calls bypass the gfes. Default 1s; 0 turns
	// load reporting off (the plan then does not see the xDS clients'
	// load).
	LoadReportInterval time.Duration
}

// validate appends the problems of c to errs, naming each field as its
// flag; tls is the control plane's own transport security.
func (c XDSConfig) validate(tls mtls.ServerConfig, bad func(string, ...any)) {
	if c.Listen == "" {
		return
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("xds-listen: must be host:port, got %q", c.Listen)
	}
	if !tls.InsecurePlaintext && len(c.AllowedClients) == 0 {
		bad("xds-allowed-clients: required with --xds-listen (the identities of the xDS clients served), or --insecure-plaintext")
	}
	if c.PlanInterval <= 0 {
		bad("xds-plan-interval: must be > 0, got %v", c.PlanInterval)
	}
	if !(c.Damping > 0 && c.Damping <= 1) {
		bad("xds-damping: must be in (0,1], got %v", c.Damping)
	}
	if c.LoadReportInterval < 0 {
		bad("xds-load-report-interval: must be >= 0 (0 = off), got %v", c.LoadReportInterval)
	}
	if err := (xdsexport.Options{EnvoyListen: c.EnvoyListen}).Validate(); err != nil {
		bad("xds-envoy-listen: %v", err)
	}
}

// xdsExporter plans every PlanInterval, with the gfes' own table build
// (routing.Builder: bounds on gossip, capacity factors, the planner,
// damping) over the served State and every gfe's gossiped state, and
// serves the plans over xDS. It must not be copied.
type xdsExporter struct {
	// Immutable after newXDSExporter.
	cfg     XDSConfig
	node    string
	log     zerolog.Logger
	clk     clock.Clock
	hub     *hub
	pub     *statePublisher
	srv     *xdsexport.Server
	lrs     *xdsexport.LoadReports // nil: load reporting off
	grpcSrv *grpc.Server
	lis     net.Listener

	// Owned by Run's goroutine.
	m       *metrics
	builder *routing.Builder
	last    *State             // the State snap was made from
	snap    *snapshot.Snapshot // last as the table build reads it
}

// newXDSExporter binds the xDS listener with the control plane's
// certificate and cfg.AllowedClients.
func newXDSExporter(cfg Config, h *hub, pub *statePublisher, opts Options, m *metrics) (*xdsExporter, error) {
	log := opts.Logger.With().Str("component", "xds").Logger()
	tls := cfg.TLS
	tls.AllowedClients = cfg.XDS.AllowedClients
	creds, err := mtls.ServerCredentials(tls, mtls.Options{Logger: log, Refused: func(error) { m.tlsRefused.Inc() }})
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	// The streams live as long as the exporter; Run's context ends them.
	srv, err := xdsexport.NewServer(context.Background(), xdsexport.Options{EnvoyListen: cfg.XDS.EnvoyListen, LoadReporting: cfg.XDS.LoadReportInterval > 0}, log)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	lis, err := net.Listen("tcp", cfg.XDS.Listen)
	if err != nil {
		return nil, fmt.Errorf("xds: listen: %w", err)
	}
	x := &xdsExporter{
		cfg: cfg.XDS, node: cfg.NodeName, log: log, clk: clock.OrReal(opts.Clock), hub: h, pub: pub, srv: srv, lis: lis, m: m,
		grpcSrv: grpc.NewServer(grpc.Creds(creds),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true})),
		builder: routing.NewBuilder(routing.Config{Node: cfg.NodeName, Damping: cfg.XDS.Damping, Bounds: routing.DefaultBounds()},
			routing.Options{Clock: opts.Clock, Rand: rand.Uint64}),
	}
	srv.Register(x.grpcSrv)
	if cfg.XDS.LoadReportInterval > 0 {
		x.lrs = xdsexport.NewLoadReports(cfg.XDS.LoadReportInterval, opts.Clock)
		lrsv3.RegisterLoadReportingServiceServer(x.grpcSrv, x.lrs)
	}
	return x, nil
}

// Addr returns the xDS listen address (with the chosen port).
func (x *xdsExporter) Addr() string { return x.lis.Addr().String() }

// Run serves xDS and re-plans every PlanInterval and whenever the served
// State changes, until ctx is done; then it stops the server at once (xDS
// streams never end by themselves).
func (x *xdsExporter) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go serveGRPC(x.grpcSrv, x.lis, errc)
	x.log.Info().Str("addr", x.Addr()).Msg("xds listening")
	t := x.clk.NewTicker(x.cfg.PlanInterval)
	defer t.Stop()
	for {
		_, changed := x.hub.Load()
		select {
		case <-ctx.Done():
			x.grpcSrv.Stop()
			<-errc
			x.log.Info().Msg("xds stopped")
			return nil
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case now := <-t.C():
			x.step(ctx, now)
		case <-changed:
			x.step(ctx, x.clk.Now())
		}
	}
}

// step plans from the served State and gossip, and updates the export.
// Before the State is Ready nothing is served: clients wait, as gfes do.
func (x *xdsExporter) step(ctx context.Context, now time.Time) {
	st, _ := x.hub.Load()
	if st == nil || !st.Ready {
		return
	}
	if st != x.last {
		x.last, x.snap = st, st.domain()
	}
	if x.lrs != nil {
		// Gossiped, so that the gfes plan with it; this replica reads its
		// own part back from its gossip view with everyone else's.
		d, unplaced := x.lrs.Demand(now)
		x.m.setXDSDemand(d, unplaced)
		if err := x.pub.SetSiteDemand(d); err != nil {
			x.log.Error().Err(err).Msg("publishing the xDS clients' demand")
		}
	}
	t, problems := x.builder.Build(routing.Input{
		Snapshot: x.snap,
		Peers:    routing.GossipPeers(x.pub.Snapshot()),
		Self:     routing.Peer{Node: x.node},
		Now:      now,
	})
	for _, err := range problems {
		x.log.Error().Err(err).Msg("xds plan")
	}
	plans := map[string]*waterfall.Plan{}
	for name, svc := range t.Services {
		if p := svc.Plan(); p != nil {
			plans[name] = p
		}
	}
	if _, err := x.srv.Update(ctx, xdsexport.Input{Snapshot: x.snap, Plans: plans}); err != nil && !errors.Is(err, context.Canceled) {
		x.log.Error().Err(err).Msg("xds update")
	}
}

// domain returns s as the gfes' table build reads a snapshot: the
// configuration and every instance's health (unknown counts as not
// healthy, as on a gfe).
func (s *State) domain() *snapshot.Snapshot {
	out := &snapshot.Snapshot{
		Version: s.Version, Config: s.Config.Config, Source: s.Config.Source, GeneratedAt: s.At,
		Health: make(map[string]snapshot.InstanceHealth, len(s.Health)),
	}
	for _, h := range s.Health {
		out.Health[h.Address] = snapshot.InstanceHealth{Group: h.Group, Address: h.Address, Healthy: h.Healthy(), Since: h.Since, Detail: h.Detail}
	}
	return out
}
