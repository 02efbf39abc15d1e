package routing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/routinginput"
	"github.com/spillway-lb/spillway/lb/routing"
)

// gossipRig runs gossip nodes over real memberlist on loopback with one
// keyring, their certificates from one CA (CN = the node name, as
// deploy/mkcerts.sh issues them), until the test ends.
type gossipRig struct {
	t   *testing.T
	ca  *devpki.CA
	dir string
}

const rigKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

func newGossipRig(t *testing.T) *gossipRig {
	ca, err := devpki.NewCA("routing test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &gossipRig{t: t, ca: ca, dir: t.TempDir()}
}

// seals returns the Options of a node that seals with key's certificate
// (its own, or a stolen one) and verifies against the rig's CA.
func (r *gossipRig) seals(key string) gossip.Options {
	f, err := r.ca.IssueFiles(r.dir, key, devpki.Leaf{CommonName: key, ValidFor: time.Hour})
	if err != nil {
		r.t.Fatal(err)
	}
	s, err := mtls.NewGossipSealer(mtls.Files(f), key, zerolog.Nop())
	if err != nil {
		r.t.Fatal(err)
	}
	v, err := mtls.NewGossipVerifier(f.CA, zerolog.Nop())
	if err != nil {
		r.t.Fatal(err)
	}
	return gossip.Options{Sealer: s, Verifier: v}
}

// start runs a node named p.Node that publishes p as its gfe state and
// joins seed (none for the first).
func (r *gossipRig) start(p routing.Peer, opts gossip.Options, seed string) *gossip.Node {
	r.t.Helper()
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindPort, cfg.Keys, cfg.UDPBufferSize = p.Node, 0, []string{rigKey}, 8192
	cfg.LeaveTimeout = 200 * time.Millisecond
	if seed != "" {
		cfg.Seeds = []string{seed}
	}
	n, err := gossip.New(cfg, opts)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := n.Publish(gossip.NodeState{Kind: gossip.KindGFE, Site: p.Site, Demand: p.Demand, RTT: p.RTT}); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("%s: %v", p.Node, err)
		}
	})
	<-n.Ready()
	return n
}

// refusals is the total of n's seal refusals.
func refusals(n *gossip.Node) uint64 {
	var sum uint64
	for _, v := range n.Stats().Refused() {
		sum += v
	}
	return sum
}

// waitGossip polls cond every 5ms until it holds, for at most 20s.
func waitGossip(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSybilGFEsDoNotMoveTheirSite replays the sybil finding over real
// gossip: this gfe (nyc) and the honest gfes of lon and tokyo seal their
// states with their certificates; key holders join as two more nyc gfes
// that claim nyc is 5000 ms from us-east and 0 ms from eu-west (two liars
// outvote the median of three), and as ten lon gfes that each claim 1e9
// req/s (20x the capacity at 2x each). One nyc sybil is unsealed, the
// other sealed with the compromised gfe-lon's key; the lon sybils are
// unsealed. This gfe refuses every one (counted), so its plan is the one
// it made before: nyc all in us-east, lon's demand what its honest gfe
// says. Without seals nyc moved to eu-west and lon counted the site bound.
func TestSybilGFEsDoNotMoveTheirSite(t *testing.T) {
	g := newGossipRig(t)
	self := g.start(nyc, g.seals(nyc.Node), "")
	seed := self.Addr()
	for _, p := range honest {
		g.start(p, g.seals(p.Node), seed)
	}
	waitGossip(t, "the honest gfes' states", func() bool { return len(self.Snapshot().States) == 3 })
	r := newPlanRig(t, routing.DefaultBounds())
	if shares, _ := r.settle(routinginput.Peers(self.Snapshot())); !allUSEast(shares) {
		t.Fatalf("before the sybils nyc sends %v, want everything to us-east", shares)
	}
	lonBefore := r.siteDemand("lon")

	type sybil struct {
		peer routing.Peer
		opts gossip.Options
	}
	lie := map[string]float64{"us-east": 5000, "eu-west": 0, "asia-east": 0}
	sybils := []sybil{
		{routing.Peer{Node: "gfe-nyc-evil-1", Site: "nyc", RTT: lie}, gossip.Options{}},
		{routing.Peer{Node: "gfe-nyc-evil-2", Site: "nyc", RTT: lie}, g.seals("gfe-lon")},
	}
	for i := range 10 {
		sybils = append(sybils, sybil{routing.Peer{Node: fmt.Sprintf("gfe-lon-evil-%d", i), Site: "lon",
			Demand: map[string]float64{"web": 1e9}, RTT: honest[0].RTT}, gossip.Options{}})
	}
	// One at a time, each decided (refused or believed) before the next.
	for _, s := range sybils {
		before := refusals(self)
		g.start(s.peer, s.opts, seed)
		waitGossip(t, s.peer.Node+"'s state refused or believed", func() bool {
			_, believed := self.Snapshot().States[s.peer.Node]
			return believed || refusals(self) > before
		})
	}
	snap := self.Snapshot()
	if got := len(snap.States); got != 3 {
		t.Errorf("this gfe believes %d states, want 3: its own and the two honest gfes' (members %v)", got, snap.Members)
	}
	shares, util := r.settle(routinginput.Peers(snap))
	if !allUSEast(shares) {
		t.Errorf("with the sybils nyc sends %v, want everything to us-east", shares)
	}
	if lon := r.siteDemand("lon"); lon != lonBefore {
		t.Errorf("with the sybils lon's demand is %.0f (max utilization %.3g), want %.0f as before", lon, util, lonBefore)
	}
	if st := self.Stats(); st.Unsealed < 11 || st.BadSeals < 1 {
		t.Errorf("refusals %v, want at least 11 unsealed and 1 bad seal", st.Refused())
	}
}
