package gossip

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a Prometheus collector of n's seal checks (see
// seal.go), for a daemon to register:
//
//	<prefix>_gossip_refused_states_total{reason}  states refused for their seal, by reason (RefusalReasons)
//	<prefix>_gossip_unsealed_states               other members' states believed without a seal
//
// The second is 0 on a node that verifies seals and does not accept
// unsealed states; during a rolling upgrade with AcceptUnsealed it counts
// the members that do not seal yet.
func (n *Node) Collector(prefix string) prometheus.Collector {
	return &collector{
		n: n,
		refused: prometheus.NewDesc(prefix+"_gossip_refused_states_total",
			"Gossip states refused for their seal, by reason: unsealed (no seal where one is required), bad_seal (does not verify: "+
				"forged, a certificate the CA bundle does not vouch for or that does not name the node), unknown_certificate "+
				"(not seen yet; repaired by push/pull), stale_seal (older than the seal's max age: a replay, or a clock behind).",
			[]string{"reason"}, nil),
		unsealed: prometheus.NewDesc(prefix+"_gossip_unsealed_states",
			"Other members' gossip states believed without a seal (without a CA to verify seals, or with accept-unsealed).", nil, nil),
	}
}

type collector struct {
	n                 *Node
	refused, unsealed *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.refused
	ch <- c.unsealed
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	refused := c.n.Stats().Refused()
	for _, r := range RefusalReasons {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(refused[r]), r)
	}
	unsealed := 0
	for _, name := range c.n.Snapshot().Unsealed() {
		if name != c.n.cfg.Name {
			unsealed++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.unsealed, prometheus.GaugeValue, float64(unsealed))
}
