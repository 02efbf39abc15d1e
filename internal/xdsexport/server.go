package xdsexport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/lb/clock"
)

// SiteOf returns the site an xDS client's node claims: its
// node.locality.region ("" when it has none). The export places a client
// with Access.Place, which this claim alone never decides.
func SiteOf(n *core.Node) string { return n.GetLocality().GetRegion() }

// KindOf returns the kind of an xDS client: KindEnvoy when its
// node.user_agent_name is "envoy", KindGRPC otherwise.
func KindOf(n *core.Node) Kind {
	if n.GetUserAgentName() == "envoy" {
		return KindEnvoy
	}
	return KindGRPC
}

// unplacedKey is the cache key of a request whose node the export did not
// place (none should reach the cache): it never gets a snapshot.
const unplacedKey = "\x00unplaced"

// Server serves the export over the xDS APIs (ADS and the per-type
// services, state of the world and delta) from a go-control-plane
// SnapshotCache keyed by View.
//
// Every stream is admitted by Options.Gate (streams in total and per
// client), and its first request placed by Options.Access from the
// client's certificate: a node claiming a site its certificate is not
// granted is refused with PERMISSION_DENIED, and every request then
// carries a node of the export's own making (the granted site, the kind),
// so that the cache never keys on what a client claims. A request naming
// another site later on the same stream is refused too. The unary Fetch*
// calls are refused (UNIMPLEMENTED): clients use streams.
//
// Snapshots are held for the plan's sites (every kind, every service) and
// for the Views clients' streams use, at most Limits.MaxKeys of them; one
// without a stream for Limits.KeyGrace is dropped, so that streams that
// come and go leave nothing behind.
//
// Update may be called from one goroutine at a time; the gRPC services
// from any.
type Server struct {
	// Immutable after NewServer.
	ctx    context.Context // NewServer's: bounds the streams
	opts   Options
	log    zerolog.Logger // sampled: refusals can come fast
	clk    clock.Clock
	access *Access
	gate   *Gate
	cache  cachev3.SnapshotCache
	srv    serverv3.Server

	// nodes maps each node the export put on a request to its cache key
	// (the cache's NodeHash reads it). Written under mu.
	nodes sync.Map

	mu sync.Mutex
	// Guarded by mu.
	in      *Input // of the last Update; nil before the first
	base    map[string]bool
	keys    *keyTable
	streams map[streamID]*xdsStream
}

// streamID names a stream: the state-of-the-world and delta servers
// number their streams separately.
type streamID struct {
	delta bool
	id    int64
}

// xdsStream is one open discovery stream.
type xdsStream struct {
	ids     []string // the client certificate's identities
	client  string   // what the Gate counts it under
	release func()   // its place in the Gate
	// Set by its first request.
	claim string     // the site its node claimed
	kind  Kind       // its kind
	node  *core.Node // the node the export puts on its requests; nil before the first
	key   string     // its View's key
}

// NewServer returns a Server with an empty cache: clients wait for the
// first Update. ctx bounds the server's streams.
func NewServer(ctx context.Context, opts Options, log zerolog.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Access == nil {
		return nil, errors.New("xdsexport: Options.Access is required (OpenAccess without client certificates)")
	}
	s := &Server{
		ctx: ctx, opts: opts, log: log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second}), clk: clock.OrReal(opts.Clock),
		access: opts.Access, gate: opts.Gate,
		base: map[string]bool{}, keys: newKeyTable(opts.Limits), streams: map[streamID]*xdsStream{},
	}
	if s.gate == nil {
		s.gate = NewGate(opts.Limits)
	}
	s.cache = cachev3.NewSnapshotCache(false, nodeHash{s}, cacheLogger{log})
	s.srv = serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamOpenFunc:      func(ctx context.Context, id int64, _ string) error { return s.open(ctx, streamID{false, id}) },
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, _ string) error { return s.open(ctx, streamID{true, id}) },
		StreamClosedFunc:    func(id int64, _ *core.Node) { s.closed(streamID{false, id}) },
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) {
			s.closed(streamID{true, id})
		},
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			if e := r.GetErrorDetail(); e != nil {
				s.log.Warn().Int64("stream", id).Str("node", r.GetNode().GetId()).Str("type", r.GetTypeUrl()).
					Str("version", r.GetVersionInfo()).Str("error", e.GetMessage()).Msg("xds client rejected a push (NACK)")
			}
			n, err := s.request(streamID{false, id}, r.GetNode())
			r.Node = n
			return err
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			n, err := s.request(streamID{true, id}, r.GetNode())
			r.Node = n
			return err
		},
		FetchRequestFunc: func(context.Context, *discovery.DiscoveryRequest) error {
			s.refused(RefusedFetch)
			return status.Error(codes.Unimplemented, "xds: Fetch is not served; use a discovery stream")
		},
	})
	return s, nil
}

// Gate returns the Gate the server's streams are counted by.
func (s *Server) Gate() *Gate { return s.gate }

// Register registers the discovery services on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.srv)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.srv)
}

// refused counts a refusal.
func (s *Server) refused(reason string) {
	if s.opts.Refused != nil {
		s.opts.Refused(reason)
	}
}

// statusOf returns the gRPC status of a refusal (an error of Access.Place,
// Gate.Enter or the key table).
func statusOf(err error) error {
	code := codes.PermissionDenied
	switch refusal(err) {
	case RefusedBadSite:
		code = codes.InvalidArgument
	case RefusedStreams, RefusedClientStreams, RefusedKeys:
		code = codes.ResourceExhausted
	}
	return status.Error(code, "xds: "+err.Error())
}

// open admits a stream through the Gate.
func (s *Server) open(ctx context.Context, id streamID) error {
	ids, client := clientOf(ctx)
	release, err := s.gate.Enter(client)
	if err != nil {
		s.refused(refusal(err))
		s.log.Warn().Err(err).Str("client", client).Msg("xds stream refused")
		return statusOf(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[id] = &xdsStream{ids: ids, client: client, release: release}
	return nil
}

// errNodeChanged refuses a request whose node claims another site or kind
// than the stream's first.
var errNodeChanged = errors.New("xdsexport: a stream's node cannot change site or kind")

// request places the node of a stream's request (nil: as before) and
// returns the node the export puts on the request instead.
func (s *Server) request(id streamID, n *core.Node) (*core.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return nil, status.Error(codes.Internal, "xds: request on a stream that was not opened")
	}
	if st.node != nil {
		if n != nil && (SiteOf(n) != st.claim || KindOf(n) != st.kind) {
			err := fmt.Errorf("%w: first %s at %q, now %s at %q", errNodeChanged, st.kind, st.claim, KindOf(n), SiteOf(n))
			return s.refuseLocked(st, err)
		}
		return st.node, nil
	}
	p, err := s.access.Place(st.ids, SiteOf(n))
	if err != nil {
		return s.refuseLocked(st, err)
	}
	v := View{Kind: KindOf(n), Site: p.Site, Services: p.Services}
	now := s.clk.Now()
	fresh, evicted, err := s.keys.acquire(v, now)
	if err != nil {
		return s.refuseLocked(st, err)
	}
	if evicted != "" && !s.base[evicted] {
		s.cache.ClearSnapshot(evicted)
	}
	st.claim, st.kind, st.key = SiteOf(n), v.Kind, v.Key()
	st.node = &core.Node{Id: n.GetId(), UserAgentName: n.GetUserAgentName(), Locality: &core.Locality{Region: p.Site}}
	s.nodes.Store(st.node, st.key)
	if fresh && !s.base[st.key] && s.in != nil {
		if err := s.setLocked(s.ctx, v); err != nil {
			s.log.Error().Err(err).Str("key", st.key).Msg("xds snapshot")
		}
	}
	return st.node, nil
}

// refuseLocked counts and logs a refused request of st and returns its
// status. Caller must hold s.mu.
func (s *Server) refuseLocked(st *xdsStream, err error) (*core.Node, error) {
	s.refused(refusal(err))
	s.log.Warn().Err(err).Str("client", st.client).Msg("xds request refused")
	return nil, statusOf(err)
}

// closed releases a stream's places in the Gate and the key table.
func (s *Server) closed(id streamID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return // refused by the Gate
	}
	delete(s.streams, id)
	st.release()
	if st.node != nil {
		s.nodes.Delete(st.node)
		s.keys.release(st.key, s.clk.Now())
	}
}

// nodeHash keys the cache by the View of each request's stream: the node
// the export put on it. A node it did not put there (which no request
// should carry) gets unplacedKey, which never has a snapshot.
type nodeHash struct{ s *Server }

func (h nodeHash) ID(n *core.Node) string {
	if k, ok := h.s.nodes.Load(n); ok {
		return k.(string)
	}
	return unplacedKey
}

// Update sets the snapshot of every View served: each kind at every site
// of in's plans and at the site "" (clients without a site), seeing every
// service, and every View a client's stream uses or used within
// Limits.KeyGrace. It drops the snapshots of the other Views. A snapshot
// whose versions did not change pushes nothing. It returns the keys set,
// sorted.
func (s *Server) Update(ctx context.Context, in Input) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in = &in
	views := map[string]View{}
	base := map[string]bool{}
	for _, site := range append(in.Sites(), "") {
		for _, kind := range []Kind{KindGRPC, KindEnvoy} {
			v := View{Kind: kind, Site: site}
			views[v.Key()], base[v.Key()] = v, true
		}
	}
	for _, k := range s.keys.expire(s.clk.Now()) {
		if !base[k] {
			s.cache.ClearSnapshot(k)
		}
	}
	for k := range s.base {
		if !base[k] && !s.keys.has(k) {
			s.cache.ClearSnapshot(k) // a site that left the plan; re-set below if a stream uses it
		}
	}
	s.base = base
	for _, v := range s.keys.views() {
		views[v.Key()] = v
	}
	out := make([]string, 0, len(views))
	for k, v := range views {
		if err := s.setLocked(ctx, v); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// setLocked builds v's snapshot from the last Update's Input and sets it.
// Caller must hold s.mu; s.in must be set. Setting a snapshot sends each
// open watch of v its response without waiting on the watch's stream
// (every watch's channel has room for its one response), so holding s.mu
// here cannot deadlock with a stream waiting for s.mu in a callback.
func (s *Server) setLocked(ctx context.Context, v View) error {
	snap, err := BuildView(*s.in, s.opts, v)
	if err != nil {
		return err
	}
	if err := s.cache.SetSnapshot(ctx, v.Key(), snap); err != nil {
		return fmt.Errorf("xdsexport: set snapshot %s: %w", v.Key(), err)
	}
	return nil
}

// Snapshot returns the snapshot served to the clients of kind at site that
// see every service, if one was set.
func (s *Server) Snapshot(kind Kind, site string) (*cachev3.Snapshot, bool) {
	return s.SnapshotOf(View{Kind: kind, Site: site})
}

// SnapshotOf returns the snapshot served to the clients of v, if one was
// set.
func (s *Server) SnapshotOf(v View) (*cachev3.Snapshot, bool) {
	rs, err := s.cache.GetSnapshot(v.Key())
	if err != nil {
		return nil, false
	}
	snap, ok := rs.(*cachev3.Snapshot)
	return snap, ok
}

// Held reports what the server holds for clients: the keys of the
// snapshots it sets besides those of the plan's sites (Views with a
// stream, or without one for less than Limits.KeyGrace), and the keys the
// cache keeps any state for (snapshots and watches), sorted.
func (s *Server) Held() (views, cached []string) {
	s.mu.Lock()
	for _, v := range s.keys.views() {
		views = append(views, v.Key())
	}
	s.mu.Unlock()
	cached = s.cache.GetStatusKeys()
	slices.Sort(views)
	slices.Sort(cached)
	return views, cached
}

// cacheLogger adapts zerolog to go-control-plane's logger; its debug and
// info lines (one per watch) go to debug.
type cacheLogger struct{ l zerolog.Logger }

func (c cacheLogger) Debugf(f string, a ...any) { c.l.Debug().Msgf(f, a...) }
func (c cacheLogger) Infof(f string, a ...any)  { c.l.Debug().Msgf(f, a...) }
func (c cacheLogger) Warnf(f string, a ...any)  { c.l.Warn().Msgf(f, a...) }
func (c cacheLogger) Errorf(f string, a ...any) { c.l.Error().Msgf(f, a...) }
