package xdsexport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/spillway-lb/spillway/internal/mtls"
)

// Limits bound what xDS clients can make the control plane hold: streams,
// snapshots (cache keys) and load-report entries. Every one of them is
// refused or dropped past its limit, and counted (Options.Refused,
// LRSOptions.Dropped), so that no client, allowed or not, can grow the
// control plane's memory or its work per plan interval without bound.
type Limits struct {
	// MaxStreams bounds the xDS streams (ADS, the per-type services, and
	// LRS) open at once, from every client together. A stream past it is
	// refused with RESOURCE_EXHAUSTED. Default 10000, the gfe listener's
	// max_connections: two streams (ADS and LRS) for each of 5000 clients.
	MaxStreams int
	// MaxStreamsPerClient bounds the streams open at once from one client
	// identity (its certificate's identities; its IP address without a
	// certificate), so that one identity cannot take every stream.
	// Default 256, the gfe listener's max_connections_per_client: a fleet
	// sharing one certificate needs more.
	MaxStreamsPerClient int
	// MaxKeys bounds the snapshots held for clients (one per client kind,
	// site and set of visible services) besides those of the plan's own
	// sites, which every plan interval rebuilds. A stream that needs a new
	// one past the limit takes the place of the one idle longest, or is
	// refused with RESOURCE_EXHAUSTED when every one has a stream.
	// Default 512: each costs a Build per plan interval (tens of
	// microseconds for a small configuration).
	MaxKeys int
	// KeyGrace is how long a snapshot without a stream is kept (and
	// rebuilt) before it is dropped, so that a client that reconnects
	// finds it. Default 30s.
	KeyGrace time.Duration
}

// DefaultLimits returns the defaults of every field of Limits.
func DefaultLimits() Limits {
	return Limits{MaxStreams: 10000, MaxStreamsPerClient: 256, MaxKeys: 512, KeyGrace: 30 * time.Second}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxStreams == 0 {
		l.MaxStreams = d.MaxStreams
	}
	if l.MaxStreamsPerClient == 0 {
		l.MaxStreamsPerClient = d.MaxStreamsPerClient
	}
	if l.MaxKeys == 0 {
		l.MaxKeys = d.MaxKeys
	}
	if l.KeyGrace == 0 {
		l.KeyGrace = d.KeyGrace
	}
	return l
}

// Validate reports every problem with l, naming its field (0 means the
// default).
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"max_streams", l.MaxStreams}, {"max_streams_per_client", l.MaxStreamsPerClient}, {"max_keys", l.MaxKeys}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("xds.%s: must be >= 0 (0: the default), got %d", f.name, f.v))
		}
	}
	if l.KeyGrace < 0 {
		errs = append(errs, fmt.Errorf("xds.key_grace: must be >= 0 (0: the default), got %v", l.KeyGrace))
	}
	return errors.Join(errs...)
}

// The reasons a stream is refused, as Options.Refused and
// LRSOptions.Refused receive them (a metric label).
const (
	RefusedSite          = "site"           // the node claims a site its certificate is not granted
	RefusedBadSite       = "bad_site"       // the claimed site is not a site name
	RefusedNotAllowed    = "not_allowed"    // no grant matches the certificate
	RefusedNodeChanged   = "node_changed"   // a later request names another site
	RefusedStreams       = "streams"        // Limits.MaxStreams
	RefusedClientStreams = "client_streams" // Limits.MaxStreamsPerClient
	RefusedKeys          = "keys"           // Limits.MaxKeys, every key with a stream
	RefusedFetch         = "fetch"          // unary Fetch* calls are not served
)

// Gate counts the open streams of every client identity against
// Limits.MaxStreams and MaxStreamsPerClient. One Gate is shared by the
// discovery server and the load reporting service. Safe for concurrent
// use.
type Gate struct {
	// Immutable after NewGate.
	max, perClient int

	mu sync.Mutex
	// Guarded by mu.
	total int
	by    map[string]int
}

// NewGate returns a Gate with l's stream limits (0: the defaults).
func NewGate(l Limits) *Gate {
	l = l.withDefaults()
	return &Gate{max: l.MaxStreams, perClient: l.MaxStreamsPerClient, by: map[string]int{}}
}

// errStreams and errClientStreams are Enter's refusals.
var (
	errStreams       = errors.New("xdsexport: too many xDS streams open")
	errClientStreams = errors.New("xdsexport: too many xDS streams open for this client")
)

// Enter admits one more stream of client, or refuses it (errStreams,
// errClientStreams). Each admitted stream must be released by calling the
// returned function once.
func (g *Gate) Enter(client string) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.total >= g.max {
		return nil, fmt.Errorf("%w: %d, the limit", errStreams, g.total)
	}
	if g.by[client] >= g.perClient {
		return nil, fmt.Errorf("%w: %d, the limit per client", errClientStreams, g.by[client])
	}
	g.total++
	g.by[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.total--
			if g.by[client]--; g.by[client] <= 0 {
				delete(g.by, client)
			}
		})
	}, nil
}

// Open returns the number of streams open.
func (g *Gate) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

// clientOf returns the identities of the client of the call in ctx (nil
// without a certificate) and the name its streams are counted under: its
// identities, or its IP address without a certificate.
func clientOf(ctx context.Context) ([]string, string) {
	ids := mtls.PeerIdentities(ctx)
	if len(ids) > 0 {
		return ids, strings.Join(uniq(ids), ",")
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil, "addr:"
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		host = p.Addr.String()
	}
	return nil, "addr:" + host
}

// refusal returns the Refused reason of an error of Access.Place or
// Gate.Enter.
func refusal(err error) string {
	switch {
	case errors.Is(err, ErrSiteNotAllowed):
		return RefusedSite
	case errors.Is(err, ErrBadSite):
		return RefusedBadSite
	case errors.Is(err, errStreams):
		return RefusedStreams
	case errors.Is(err, errClientStreams):
		return RefusedClientStreams
	case errors.Is(err, errKeys):
		return RefusedKeys
	case errors.Is(err, errNodeChanged):
		return RefusedNodeChanged
	default:
		return RefusedNotAllowed
	}
}
