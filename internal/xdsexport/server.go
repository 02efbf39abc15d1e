package xdsexport

import (
	"context"
	"fmt"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
)

// SiteOf returns the site of an xDS client: its node.locality.region ("" when
// it has none).
func SiteOf(n *core.Node) string { return n.GetLocality().GetRegion() }

// KindOf returns the kind of an xDS client: KindEnvoy when its
// node.user_agent_name is "envoy", KindGRPC otherwise.
func KindOf(n *core.Node) Kind {
	if n.GetUserAgentName() == "envoy" {
		return KindEnvoy
	}
	return KindGRPC
}

// Key is the snapshot-cache key of the clients of kind at site.
func Key(kind Kind, site string) string { return string(kind) + "/" + site }

// parseKey splits a Key.
func parseKey(k string) (Kind, string, bool) {
	kind, site, ok := strings.Cut(k, "/")
	if !ok || (Kind(kind) != KindGRPC && Kind(kind) != KindEnvoy) {
		return "", "", false
	}
	return Kind(kind), site, true
}

// NodeHash keys the snapshot cache by client kind and site (Key), so that
// every client at a site shares one snapshot.
type NodeHash struct{}

// ID implements cachev3.NodeHash.
func (NodeHash) ID(n *core.Node) string { return Key(KindOf(n), SiteOf(n)) }

// Server serves the export over the xDS APIs (ADS and the per-type
// services, state of the world and delta) from a go-control-plane
// SnapshotCache keyed by NodeHash. Update may be called from one goroutine
// at a time; the gRPC services from any.
type Server struct {
	opts  Options
	log   zerolog.Logger
	cache cachev3.SnapshotCache
	srv   serverv3.Server
}

// NewServer returns a Server with an empty cache: clients wait for the
// first Update. ctx bounds the server's streams.
func NewServer(ctx context.Context, opts Options, log zerolog.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts.withDefaults(), log: log}
	s.cache = cachev3.NewSnapshotCache(false, NodeHash{}, cacheLogger{log})
	s.srv = serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			if e := r.GetErrorDetail(); e != nil {
				s.log.Warn().Int64("stream", id).Str("node", r.GetNode().GetId()).Str("type", r.GetTypeUrl()).
					Str("version", r.GetVersionInfo()).Str("error", e.GetMessage()).Msg("xds client rejected a push (NACK)")
			}
			return nil
		},
	})
	return s, nil
}

// Register registers the discovery services on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.srv)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.srv)
}

// Update sets the snapshot of every key: each kind at every site of in's
// plans, at the site "" (clients without a locality), and at every site a
// client has asked for (unknown sites, which get the aggregate weights).
// A snapshot whose versions did not change pushes nothing. It returns the
// keys set, sorted.
func (s *Server) Update(ctx context.Context, in Input) ([]string, error) {
	keys := map[string]bool{}
	for _, site := range append(in.Sites(), "") {
		keys[Key(KindGRPC, site)] = true
		keys[Key(KindEnvoy, site)] = true
	}
	for _, k := range s.cache.GetStatusKeys() {
		keys[k] = true
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		kind, site, ok := parseKey(k)
		if !ok {
			continue
		}
		snap, err := Build(in, s.opts, kind, site)
		if err != nil {
			return nil, err
		}
		if err := s.cache.SetSnapshot(ctx, k, snap); err != nil {
			return nil, fmt.Errorf("xdsexport: set snapshot %s: %w", k, err)
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// Snapshot returns the snapshot served to the clients of kind at site, if
// one was set.
func (s *Server) Snapshot(kind Kind, site string) (*cachev3.Snapshot, bool) {
	rs, err := s.cache.GetSnapshot(Key(kind, site))
	if err != nil {
		return nil, false
	}
	snap, ok := rs.(*cachev3.Snapshot)
	return snap, ok
}

// cacheLogger adapts zerolog to go-control-plane's logger; its debug and
// info lines (one per watch) go to debug.
type cacheLogger struct{ l zerolog.Logger }

func (c cacheLogger) Debugf(f string, a ...any) { c.l.Debug().Msgf(f, a...) }
func (c cacheLogger) Infof(f string, a ...any)  { c.l.Debug().Msgf(f, a...) }
func (c cacheLogger) Warnf(f string, a ...any)  { c.l.Warn().Msgf(f, a...) }
func (c cacheLogger) Errorf(f string, a ...any) { c.l.Error().Msgf(f, a...) }
