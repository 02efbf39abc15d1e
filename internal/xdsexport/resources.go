package xdsexport

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// Kind is the kind of xDS client, which decides its listeners.
type Kind string

const (
	// KindGRPC is a proxyless gRPC client: one api_listener per service.
	KindGRPC Kind = "grpc"
	// KindEnvoy is an Envoy proxy (node.user_agent_name "envoy"): one
	// listener with a filter chain, routed like the gfe.
	KindEnvoy Kind = "envoy"
)

// Options are the export's settings.
type Options struct {
	// EnvoyListen is the host:port Envoy's listener binds (on the Envoy's
	// own host). Required.
	EnvoyListen string
	// EnvoyListenerName names that listener and its RouteConfiguration.
	// Default "spillway".
	EnvoyListenerName string
	// LoadReporting makes every Cluster name this server as its LRS server
	// (lrs_server: self), so that clients report the calls they send
	// (LoadReports) and the plan counts them.
	LoadReporting bool

	// The rest is the Server's alone (Build ignores it).

	// Access places every client (Access.Place). Required by NewServer:
	// OpenAccess for a listener without client certificates.
	Access *Access
	// Limits bound streams and snapshots; zero fields are the defaults.
	Limits Limits
	// Gate counts the streams; share it with LoadReports. Nil: a Gate of
	// Limits of the Server's own.
	Gate *Gate
	// Clock times the snapshots without a stream (Limits.KeyGrace). Nil:
	// the real clock.
	Clock clock.Clock
	// Refused, if not nil, is called with the reason (Refused*) of every
	// stream or request refused (a metric). It must be safe for concurrent
	// use and must not block.
	Refused func(reason string)
}

func (o Options) withDefaults() Options {
	if o.EnvoyListenerName == "" {
		o.EnvoyListenerName = "spillway"
	}
	o.Limits = o.Limits.withDefaults()
	return o
}

// Validate reports every problem with o, naming its field.
func (o Options) Validate() error {
	var errs []error
	if _, _, err := splitHostPort(o.EnvoyListen); err != nil {
		errs = append(errs, fmt.Errorf("xds.envoy_listen: %w", err))
	}
	if err := o.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func splitHostPort(hp string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("port %q: must be in 1..65535", port)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, uint32(p), nil
}

// Input is what the export is built from: the configuration and health the
// gfes route by, and the plan of every planned service (nil or missing for
// a service not planned yet).
type Input struct {
	Snapshot *snapshot.Snapshot
	Plans    map[string]*waterfall.Plan
}

// Sites returns the sites of every plan in in, sorted.
func (in Input) Sites() []string {
	var out []string
	for _, p := range in.Plans {
		if p == nil {
			continue
		}
		for _, s := range p.Sites {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Build returns the xDS snapshot of the clients of kind at site that see
// every service: every type with the hash of its resources as its
// version.
func Build(in Input, opts Options, kind Kind, site string) (*cachev3.Snapshot, error) {
	return BuildView(in, opts, View{Kind: kind, Site: site})
}

// BuildView returns the xDS snapshot of the clients of v: Build's, with
// only the services v sees (their clusters, endpoints, listeners, and the
// Envoy routes to them).
func BuildView(in Input, opts Options, v View) (*cachev3.Snapshot, error) {
	opts = opts.withDefaults()
	var ls, rs, cs, es []types.Resource
	cfg := in.Snapshot.Config
	seen := Placement{Services: v.Services}
	for i := range cfg.Services {
		sc := &cfg.Services[i]
		if !seen.Allows(sc.Name) {
			continue
		}
		cs = append(cs, clusterOf(sc, opts.LoadReporting))
		es = append(es, assignment(sc, Weights(sc, in.Snapshot, in.Plans[sc.Name], v.Site), in.Snapshot))
		if v.Kind == KindGRPC {
			ls = append(ls, apiListener(sc.Name))
			rs = append(rs, serviceRoutes(sc.Name))
		}
	}
	if v.Kind == KindEnvoy {
		l, err := envoyListener(opts)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		rs = append(rs, envoyRoutes(opts.EnvoyListenerName, cfg, seen.Allows))
	}
	snap := &cachev3.Snapshot{}
	for _, t := range []struct {
		typ   resource.Type
		items []types.Resource
	}{
		{resource.ListenerType, ls}, {resource.RouteType, rs}, {resource.ClusterType, cs}, {resource.EndpointType, es},
	} {
		v, err := version(t.items)
		if err != nil {
			return nil, err
		}
		snap.Resources[cachev3.GetResponseType(t.typ)] = cachev3.NewResources(v, t.items)
	}
	return snap, nil
}

// version returns the hash of items: their deterministic encodings in
// order (each kind is built in config order, so equal input hashes equal).
func version(items []types.Resource) (string, error) {
	h := sha256.New()
	mo := proto.MarshalOptions{Deterministic: true}
	for _, it := range items {
		b, err := mo.Marshal(it)
		if err != nil {
			return "", fmt.Errorf("xdsexport: marshal %s: %w", cachev3.GetResourceName(it), err)
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ads is the config source of every RDS and EDS reference: the ADS stream
// the client already has (the only kind gRPC supports besides self).
func ads() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("xdsexport: anypb.New(%T): %v", m, err)) // only for well-known message types
	}
	return a
}

// connectionManager returns an HttpConnectionManager that takes its routes
// from RDS resource routes and ends with the router filter.
func connectionManager(statPrefix, routes string) *hcm.HttpConnectionManager {
	return &hcm.HttpConnectionManager{
		StatPrefix: statPrefix,
		CodecType:  hcm.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: ads(), RouteConfigName: routes,
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})},
		}},
	}
}

// apiListener is the Listener a gRPC client with target xds:///service
// asks for.
func apiListener(service string) *listener.Listener {
	return &listener.Listener{
		Name:        service,
		ApiListener: &listener.ApiListener{ApiListener: mustAny(connectionManager(service, service))},
	}
}

// serviceRoutes sends every call of the gRPC listener of service to its
// cluster.
func serviceRoutes(service string) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name: service,
		VirtualHosts: []*route.VirtualHost{{
			Name:    service,
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: ""}},
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: service}}},
			}},
		}},
	}
}

// envoyListener is Envoy's one listener: every request through it is
// routed by the RouteConfiguration of the same name.
func envoyListener(opts Options) (*listener.Listener, error) {
	host, port, err := splitHostPort(opts.EnvoyListen)
	if err != nil {
		return nil, fmt.Errorf("xds.envoy_listen: %w", err)
	}
	return &listener.Listener{
		Name: opts.EnvoyListenerName,
		Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
			Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains: []*listener.FilterChain{{
			Filters: []*listener.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(connectionManager(opts.EnvoyListenerName, opts.EnvoyListenerName))},
			}},
		}},
	}, nil
}

// envoyRoutes mirrors cfg's routes for Envoy: one virtual host per host
// pattern of the routes. Envoy picks the virtual host as config.Config.Route
// picks a host (exact, then the longest wildcard suffix, then "*") and
// then its first matching route, whereas Spillway falls through to less
// specific host patterns when a host's own routes miss the path; so each
// virtual host lists its own routes (longest path prefix first), then
// those of every less specific pattern that covers it, most specific
// first. A route to a service that sees does not allow keeps its place
// but answers 404 itself (direct_response), naming no cluster: the client
// learns neither the service nor its endpoints, and a request its route
// matches does not fall through to another service's route.
func envoyRoutes(name string, cfg *config.Config, sees func(service string) bool) *route.RouteConfiguration {
	byHost := map[string][]config.Route{}
	var hosts []string
	for _, r := range cfg.Routes {
		h := strings.ToLower(r.Host)
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], r)
	}
	for _, rs := range byHost {
		slices.SortStableFunc(rs, func(a, b config.Route) int { return cmp.Compare(len(b.PathPrefix), len(a.PathPrefix)) })
	}
	// Most specific first: exact hosts, then wildcards by suffix length,
	// then "*".
	spec := func(h string) int {
		switch {
		case h == "*":
			return 0
		case strings.HasPrefix(h, "*."):
			return len(h)
		default:
			return 1 << 20
		}
	}
	slices.SortStableFunc(hosts, func(a, b string) int { return cmp.Compare(spec(b), spec(a)) })
	rc := &route.RouteConfiguration{Name: name}
	for _, h := range hosts {
		vh := &route.VirtualHost{Name: h, Domains: []string{h}}
		for _, o := range hosts {
			if o != h && !covers(o, h) {
				continue
			}
			for _, r := range byHost[o] {
				rt := &route.Route{
					// As the gfe matches prefixes (lb/reqpath.HasPrefix):
					// ASCII case-insensitively.
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: r.PathPrefix}, CaseSensitive: wrapperspb.Bool(false)},
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier: &route.RouteAction_Cluster{Cluster: r.Service},
						Timeout:          durationpb.New(r.Timeout),
					}},
				}
				if !sees(r.Service) {
					rt.Action = &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 404}}
				}
				vh.Routes = append(vh.Routes, rt)
			}
		}
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
	}
	return rc
}

// covers reports whether host pattern wide matches every host pattern
// narrow matches, wide being less specific: "*" covers all, "*.example.com"
// covers "a.example.com" and "*.a.example.com".
func covers(wide, narrow string) bool {
	if wide == "*" {
		return narrow != "*"
	}
	if !strings.HasPrefix(wide, "*.") {
		return false
	}
	suffix := wide[1:] // ".example.com"
	return len(narrow) > len(wide) && strings.HasSuffix(narrow, suffix)
}

// clusterOf is the EDS cluster of service sc. Its CommonLbConfig turns on
// locality-weighted balancing in Envoy (gRPC does it anyway); upstream
// connections use the downstream protocol (HTTP/2 for gRPC calls). With
// lrs, clients report its load to this server (lrs_server: self).
func clusterOf(sc *config.Service, lrs bool) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:                 sc.Name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: sc.Name},
		ConnectTimeout:       durationpb.New(defaultConnectTimeout),
		LbPolicy:             cluster.Cluster_ROUND_ROBIN,
		CommonLbConfig: &cluster.Cluster_CommonLbConfig{
			LocalityConfigSpecifier: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(&upstreamhttp.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_UseDownstreamProtocolConfig{
					UseDownstreamProtocolConfig: &upstreamhttp.HttpProtocolOptions_UseDownstreamHttpConfig{
						HttpProtocolOptions:  &core.Http1ProtocolOptions{},
						Http2ProtocolOptions: &core.Http2ProtocolOptions{},
					},
				},
			}),
		},
	}
	if lrs {
		c.LrsServer = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Self{Self: &core.SelfConfigSource{}}}
	}
	return c
}

// defaultConnectTimeout is the clusters' connect timeout (the gfe's dialer
// uses the same).
const defaultConnectTimeout = 5 * time.Second

// assignment is the ClusterLoadAssignment of sc over locs: one
// LocalityLbEndpoints per group, every instance with its health.
func assignment(sc *config.Service, locs []Locality, s *snapshot.Snapshot) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: sc.Name}
	for _, l := range locs {
		ref, _ := s.Config.Group(l.Group) // Weights listed only groups that exist
		lle := &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.Group},
			LoadBalancingWeight: wrapperspb.UInt32(l.Weight),
			Priority:            l.Priority,
		}
		for _, in := range ref.Group.Instances {
			host, port, err := splitHostPort(in.Address)
			if err != nil {
				continue // config validated every address
			}
			hs := core.HealthStatus_UNHEALTHY
			if s.Healthy(in.Address) {
				hs = core.HealthStatus_HEALTHY
			}
			lle.LbEndpoints = append(lle.LbEndpoints, &endpoint.LbEndpoint{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
				HealthStatus: hs,
			})
		}
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	return cla
}
