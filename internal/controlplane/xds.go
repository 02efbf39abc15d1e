package controlplane

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/routinginput"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/xdsexport"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// XDSConfig is the xDS export of the plan (package xdsexport): Envoy and
// proxyless gRPC clients at a site get the gfes' plan row of that site as
// locality weights.
type XDSConfig struct {
	// Listen is the address of the xDS gRPC listener (ADS, LDS, RDS, CDS,
	// EDS). Empty (the default) turns the export off.
	Listen string
	// AllowedClients are the grants of the xDS clients served
	// (xdsexport.Grant, IDENTITY=SITE[+SITE...][/SERVICE[+SERVICE...]] or
	// IDENTITY=*): a client whose certificate has an identity (DNS/URI SAN
	// or CN, "*.suffix", "*"; see mtls.Allowed) an entry names is at one
	// of that entry's sites and sees its services. A client's
	// node.locality.region only picks among them: a claim of another site
	// is refused (xdsexport.Access.Place). The listener uses the control
	// plane's CA, certificate and key (Config.TLS) with the identities as
	// its allow list, so that xDS clients need not pass for gfes. Required
	// with Listen unless TLS.InsecurePlaintext (every client then is at
	// the site it claims).
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
	// site, planned with the gfes' own and gossiped to them, because those
	// calls bypass the gfes. Default 1s; 0 turns load reporting off (the
	// plan then does not see the xDS clients' load).
	LoadReportInterval time.Duration
	// MaxSiteDemand bounds a site's xDS demand for a service, summed over
	// every xDS client at the site, to this fraction of the service's
	// declared capacity (xdsexport.LRSConfig.MaxSiteShare); the rest is
	// counted (spillway_controlplane_xds_client_demand_excess) and logged.
	// Default 1.
	MaxSiteDemand float64
	// Limits bound the xDS clients' streams, in total and per identity,
	// and the snapshots held for them (xdsexport.Limits). Defaults: 10000
	// streams, 256 per identity, 512 snapshots, kept 30s without a stream.
	Limits xdsexport.Limits
}

// grants parses c.AllowedClients; bad receives one error per bad entry.
func (c XDSConfig) grants(bad func(string, ...any)) []xdsexport.Grant {
	var out []xdsexport.Grant
	for i, e := range c.AllowedClients {
		g, err := xdsexport.ParseGrant(e)
		if err != nil {
			bad("xds-allowed-clients[%d]: %v", i, err)
			continue
		}
		out = append(out, g)
	}
	return out
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
	switch {
	case tls.InsecurePlaintext && len(c.AllowedClients) > 0:
		bad("xds-allowed-clients: cannot be combined with --insecure-plaintext (there are no certificates to match)")
	case !tls.InsecurePlaintext && len(c.AllowedClients) == 0:
		bad("xds-allowed-clients: required with --xds-listen (IDENTITY=SITE[+SITE...][/SERVICE[+SERVICE...]] for each kind of xDS client served), or --insecure-plaintext")
	}
	c.grants(bad)
	if c.PlanInterval <= 0 {
		bad("xds-plan-interval: must be > 0, got %v", c.PlanInterval)
	}
	if !(c.Damping > 0 && c.Damping <= 1) {
		bad("xds-damping: must be in (0,1], got %v", c.Damping)
	}
	if c.LoadReportInterval < 0 {
		bad("xds-load-report-interval: must be >= 0 (0 = off), got %v", c.LoadReportInterval)
	}
	if !(c.MaxSiteDemand > 0) || math.IsInf(c.MaxSiteDemand, 0) {
		bad("xds-max-site-demand: must be a finite fraction > 0 of a service's capacity, got %v", c.MaxSiteDemand)
	}
	if err := (xdsexport.Options{EnvoyListen: c.EnvoyListen}).Validate(); err != nil {
		bad("xds-envoy-listen: %v", err)
	}
	l := c.Limits
	for _, f := range []struct {
		flag string
		v    int
	}{{"xds-max-streams", l.MaxStreams}, {"xds-max-streams-per-client", l.MaxStreamsPerClient}, {"xds-max-snapshots", l.MaxKeys}} {
		if f.v <= 0 {
			bad("%s: must be > 0, got %d", f.flag, f.v)
		}
	}
	if l.KeyGrace <= 0 {
		bad("xds-snapshot-grace: must be > 0, got %v", l.KeyGrace)
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
	excess  string             // the sites and services over the demand bound, as last logged
}

// newXDSExporter binds the xDS listener with the control plane's
// certificate and the identities of cfg.AllowedClients.
func newXDSExporter(cfg Config, h *hub, pub *statePublisher, opts Options, m *metrics) (*xdsExporter, error) {
	log := opts.Logger.With().Str("component", "xds").Logger()
	var errs []error
	grants := cfg.XDS.grants(func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) })
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	access := xdsexport.OpenAccess()
	tls := cfg.TLS
	if !tls.InsecurePlaintext {
		var err error
		if access, err = xdsexport.NewAccess(grants); err != nil {
			return nil, fmt.Errorf("xds: %w", err)
		}
		tls.AllowedClients = access.Identities()
		for _, g := range access.Trusting() {
			log.Warn().Str("grant", g.String()).Msg("xds clients of this identity are trusted with any site they claim: they can add demand to every site")
		}
	}
	creds, err := mtls.ServerCredentials(tls, mtls.Options{Logger: log, Refused: func(error) { m.tlsRefused.Inc() }})
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	refused := func(reason string) { m.xdsRefused.WithLabelValues(reason).Inc() }
	gate := xdsexport.NewGate(cfg.XDS.Limits)
	// The streams live as long as the exporter; Run's context ends them.
	srv, err := xdsexport.NewServer(context.Background(), xdsexport.Options{
		EnvoyListen: cfg.XDS.EnvoyListen, LoadReporting: cfg.XDS.LoadReportInterval > 0,
		Access: access, Limits: cfg.XDS.Limits, Gate: gate, Clock: opts.Clock, Refused: refused,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	var lrs *xdsexport.LoadReports
	if cfg.XDS.LoadReportInterval > 0 {
		lrs, err = xdsexport.NewLoadReports(
			xdsexport.LRSConfig{Interval: cfg.XDS.LoadReportInterval, MaxSiteShare: cfg.XDS.MaxSiteDemand},
			xdsexport.LRSOptions{Access: access, Gate: gate, Clock: opts.Clock, Logger: log, Refused: refused,
				Dropped: func(reason string, n int) { m.xdsLRSDropped.WithLabelValues(reason).Add(float64(n)) }})
		if err != nil {
			return nil, fmt.Errorf("xds: %w", err)
		}
	}
	lis, err := net.Listen("tcp", cfg.XDS.Listen)
	if err != nil {
		return nil, fmt.Errorf("xds: listen: %w", err)
	}
	x := &xdsExporter{
		cfg: cfg.XDS, node: cfg.NodeName, log: log, clk: clock.OrReal(opts.Clock), hub: h, pub: pub, srv: srv, lrs: lrs, lis: lis, m: m,
		grpcSrv: grpc.NewServer(grpc.Creds(creds),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true})),
		builder: routing.NewBuilder(routing.Config{Node: cfg.NodeName, Damping: cfg.XDS.Damping, Bounds: routing.DefaultBounds()},
			routing.Options{Now: clock.OrReal(opts.Clock).Now, Rand: rand.Uint64}),
	}
	for _, r := range []string{xdsexport.RefusedSite, xdsexport.RefusedStreams, xdsexport.RefusedClientStreams, xdsexport.RefusedKeys} {
		m.xdsRefused.WithLabelValues(r) // visible at 0
	}
	srv.Register(x.grpcSrv)
	if lrs != nil {
		lrsv3.RegisterLoadReportingServiceServer(x.grpcSrv, lrs)
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
		if x.lrs != nil {
			x.lrs.SetServices(capacities(x.snap.Config))
		}
	}
	if x.lrs != nil {
		x.publishDemand(now)
	}
	t, problems := x.builder.Build(routing.Input{
		Fleet: &x.snap.Fleet,
		Peers: routinginput.Peers(x.pub.Snapshot()),
		Self:  routing.Peer{Node: x.node},
		Now:   now,
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
	views, _ := x.srv.Held()
	x.m.xdsKeys.Set(float64(len(views)))
	x.m.xdsStreams.Set(float64(x.srv.Gate().Open()))
}

// domain returns s as a gfe receives it: a snapshot whose routing.Fleet,
// the configuration and every instance's health (unknown counts as not
// healthy, as on a gfe), is the export's routing input. It is the
// export's one translation of a State, made once per State (step).
func (s *State) domain() *snapshot.Snapshot {
	out := &snapshot.Snapshot{
		Fleet:  routing.Fleet{Version: s.Version, Config: s.Config.Config, Health: make(map[string]routing.InstanceHealth, len(s.Health))},
		Source: s.Config.Source, GeneratedAt: s.At,
	}
	for _, h := range s.Health {
		out.Health[h.Address] = routing.InstanceHealth{Group: h.Group, Address: h.Address, Healthy: h.Healthy(), Since: h.Since, Detail: h.Detail}
	}
	return out
}
