package edge

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves /metrics, /healthz, /readyz, /status and pprof.
func (e *Edge) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !e.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(e.Status())
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// Status is the JSON document /status serves.
type Status struct {
	Node          string             `json:"node"`
	Site          string             `json:"site"`
	Ready         bool               `json:"ready"`
	ConfigVersion string             `json:"config_version"`
	RTTms         map[string]float64 `json:"rtt_ms"`
	Members       []string           `json:"gossip_members"`
	Services      []ServiceStatus    `json:"services"`
}

// ServiceStatus is one service in Status.
type ServiceStatus struct {
	Name      string           `json:"name"`
	Policy    string           `json:"policy"`
	DemandRPS float64          `json:"demand_rps"`
	Plan      []ShareStatus    `json:"plan"`
	Regions   []RegionStatus   `json:"regions"`
	Groups    []GroupStatus    `json:"groups"`
	Sites     []SiteStatus     `json:"sites"`
	Decisions map[string]int64 `json:"decisions"`
	Failures  int64            `json:"failures"`
	// Ejected lists the backends passive outlier detection has ejected.
	Ejected []EjectedStatus `json:"ejected"`
}

// EjectedStatus is one backend ejected by outlier detection.
type EjectedStatus struct {
	Group   string    `json:"group"`
	Address string    `json:"address"`
	Until   time.Time `json:"until"`
	Reason  string    `json:"reason"`
}

// ShareStatus is one cell of this site's current plan row.
type ShareStatus struct {
	Region string  `json:"region"`
	Group  string  `json:"group"`
	Share  float64 `json:"share"`
	Reason string  `json:"reason"`
}

// RegionStatus is a region's planned load across all sites.
type RegionStatus struct {
	Name        string  `json:"name"`
	CapacityRPS float64 `json:"capacity_rps"`
	LoadRPS     float64 `json:"load_rps"`
	Utilization float64 `json:"utilization"`
}

// GroupStatus is a group's health and capacity as planned.
type GroupStatus struct {
	Name        string  `json:"name"`
	Region      string  `json:"region"`
	Zone        string  `json:"zone"`
	Instances   int     `json:"instances"`
	Healthy     int     `json:"healthy"`
	CapacityRPS float64 `json:"capacity_rps"`
}

// SiteStatus is a site's demand as this node sees it from gossip.
type SiteStatus struct {
	Name      string  `json:"name"`
	DemandRPS float64 `json:"demand_rps"`
}

// Status returns the node's current state. Safe to call from any goroutine.
func (e *Edge) Status() Status {
	st := Status{Node: e.cfg.Node, Site: e.cfg.Site, Ready: e.Ready(), RTTms: e.rtt.snapshot()}
	if snap := e.gossip.Snapshot(); snap != nil {
		st.Members = snap.Members
	}
	t := e.table.Load()
	if t == nil {
		return st
	}
	st.ConfigVersion = t.version
	names := make([]string, 0, len(t.services))
	for n := range t.services {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := t.services[n]
		ss := ServiceStatus{Name: n, Policy: string(s.cfg.Policy), Decisions: map[string]int64{}, Failures: s.meters.failures.Load()}
		for r := range numReasons {
			ss.Decisions[r.String()] = s.meters.decisions[r].Load()
		}
		if s.outliers != nil {
			for _, h := range s.outliers.Snapshot(e.clk.Now()) {
				if h.Ejected {
					ss.Ejected = append(ss.Ejected, EjectedStatus{Group: h.Group, Address: h.Name, Until: h.EjectedUntil, Reason: string(h.Reason)})
				}
			}
		}
		for _, site := range s.world.Sites {
			if site.Name == e.cfg.Site {
				ss.DemandRPS = site.Demand
			}
			ss.Sites = append(ss.Sites, SiteStatus{Name: site.Name, DemandRPS: site.Demand})
		}
		for _, r := range s.world.Regions {
			for _, g := range r.Groups {
				ss.Groups = append(ss.Groups, GroupStatus{Name: g.Name, Region: r.Name, Zone: g.Zone, Instances: g.Instances, Healthy: g.Healthy, CapacityRPS: g.Capacity})
			}
		}
		if s.plan != nil {
			for _, f := range s.plan.Row(e.cfg.Site) {
				ss.Plan = append(ss.Plan, ShareStatus{Region: f.Region, Group: f.Group, Share: f.Share, Reason: f.Reason.String()})
			}
			for _, r := range s.plan.Regions {
				ss.Regions = append(ss.Regions, RegionStatus{Name: r.Name, CapacityRPS: r.Capacity, LoadRPS: r.Load, Utilization: r.Utilization()})
			}
		}
		st.Services = append(st.Services, ss)
	}
	return st
}
