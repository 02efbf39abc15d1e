package controlplane

import (
	"github.com/prometheus/client_golang/prometheus"
)

// gfeCollector exports, at each scrape, the state of every gfe with an
// open snapshot stream (service.Nodes): which release it runs, whether it
// refuses snapshots, and how many configured fields it cannot read. A gfe
// that disconnects leaves the series.
type gfeCollector struct {
	nodes                         func() []NodeStatus
	info, nacks, dropped, lagging *prometheus.Desc
}

func newGFECollector(nodes func() []NodeStatus) *gfeCollector {
	const ns, sub = "spillway", "controlplane"
	return &gfeCollector{
		nodes: nodes,
		info: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "gfe_info"),
			"Always 1 for each connected gfe, labelled with its site, its build (release and revision, as its --version prints it) and its configuration schema: declared (it states the fields it reads) or baseline (before 0.1.0: sent only the baseline's fields).",
			[]string{"gfe", "site", "build_version", "schema"}, nil),
		nacks: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "gfe_snapshot_nacks_in_a_row"),
			"Snapshots each connected gfe refused (NACK) since it last accepted one: above 0 it serves an older snapshot and no longer follows health changes; /status has the error.",
			[]string{"gfe"}, nil),
		dropped: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "gfe_dropped_fields"),
			"Fields the served configuration sets that each connected gfe cannot read (a release before them), sent to it without them: settings it does not honour; /status names them.",
			[]string{"gfe"}, nil),
		lagging: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "lagging_gfes"),
			"Connected gfes whose last answer was a NACK: they refuse the current snapshot.",
			nil, nil),
	}
}

func (c *gfeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.nacks
	ch <- c.dropped
	ch <- c.lagging
}

func (c *gfeCollector) Collect(ch chan<- prometheus.Metric) {
	lagging := 0
	for _, n := range c.nodes() {
		if n.Streams <= 0 {
			continue
		}
		schema := "declared"
		if n.DeclaredFields == 0 {
			schema = "baseline"
		}
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, n.ID, n.Site, n.BuildVersion, schema)
		ch <- prometheus.MustNewConstMetric(c.nacks, prometheus.GaugeValue, float64(n.NacksInARow), n.ID)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.GaugeValue, float64(len(n.Dropped)), n.ID)
		if n.Lagging {
			lagging++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.lagging, prometheus.GaugeValue, float64(lagging))
}
