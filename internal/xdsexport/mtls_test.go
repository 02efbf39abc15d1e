package xdsexport

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// testTimeout bounds every wait on the network in these tests.
const testTimeout = 20 * time.Second

// testPKI is a CA that issues the export's certificate (127.0.0.1) and
// its clients'.
type testPKI struct {
	t   *testing.T
	ca  *devpki.CA
	dir string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := devpki.NewCA("xds test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, ca: ca, dir: t.TempDir()}
}

// issue returns the files of a certificate with DNS name name.
func (p *testPKI) issue(name string) mtls.Files {
	p.t.Helper()
	f, err := p.ca.IssueFiles(p.dir, name, devpki.Leaf{CommonName: name, Names: []string{name}})
	if err != nil {
		p.t.Fatal(err)
	}
	return mtls.Files(f)
}

// refusals counts Refused and Dropped calls by reason. Safe for
// concurrent use (each call is one send on a buffered channel drained by
// count).
type refusals struct{ ch chan string }

func newRefusals() *refusals { return &refusals{ch: make(chan string, 1<<16)} }

func (r *refusals) refused(reason string) { r.ch <- reason }

// count drains what arrived so far into m.
func (r *refusals) count(m map[string]int) {
	for {
		select {
		case s := <-r.ch:
			m[s]++
		default:
			return
		}
	}
}

// serveMTLS serves srv (and lrs when not nil) over mutual TLS on a
// loopback port with the identities of access as the allow list, until
// the test ends, and returns the address.
func serveMTLS(t *testing.T, p *testPKI, access *Access, srv *Server, lrs *LoadReports) string {
	t.Helper()
	creds, err := mtls.ServerCredentials(mtls.ServerConfig{Files: p.issue("127.0.0.1"), AllowedClients: access.Identities()}, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(creds))
	srv.Register(g)
	if lrs != nil {
		lrsv3.RegisterLoadReportingServiceServer(g, lrs)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// dialAs returns a connection to addr presenting a certificate of name.
func dialAs(t *testing.T, p *testPKI, addr, name string) *grpc.ClientConn {
	t.Helper()
	creds, err := mtls.ClientCredentials(mtls.ClientConfig{Files: p.issue(name)}, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// newTestServer returns a Server on access with the test snapshot and
// plan (sites nyc, lon and tokyo) set.
func newTestServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.EnvoyListen == "" {
		opts.EnvoyListen = testOpts.EnvoyListen
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := NewServer(ctx, opts, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, Input{Snapshot: testSnapshot(t), Plans: map[string]*waterfall.Plan{"web": testPlan()}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// adsFirst opens an ADS stream on cc, asks for clusters as node, and
// returns the first response, or the error that ended the stream. The
// stream stays open until the test ends, or until closed is called.
func adsFirst(t *testing.T, cc *grpc.ClientConn, node *core.Node) (resp *discovery.DiscoveryResponse, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, closed func(), err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	st, err = discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, nil, cancel, err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		return nil, nil, cancel, err
	}
	resp, err = st.Recv()
	return resp, st, cancel, err
}

// clusterNames returns the names of the clusters in resp.
func clusterNames(t *testing.T, resp *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, r := range resp.GetResources() {
		var c cluster.Cluster
		if err := r.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c.GetName())
	}
	slices.Sort(out)
	return out
}
