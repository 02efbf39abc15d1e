package gfe

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spillway-lb/spillway/internal/adminhttp"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/statuspage"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// adminHandler serves the status page at / (package statuspage),
// /metrics, /healthz, /readyz, /status and, with Config.Pprof, pprof;
// behind the admin token when Config.AdminTokenFile is set.
func (d *Daemon) adminHandler() (http.Handler, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// The detail (refused snapshots) is in the body whatever the
		// code; see stream.go for why it does not change the code.
		detail := d.readyDetail()
		if !d.Ready() {
			http.Error(w, strings.TrimSuffix("not ready\n"+detail, "\n"), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n" + detail))
	})
	statuspage.Mount(mux)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(d.Status())
	})
	if d.cfg.Pprof {
		adminhttp.MountPprof(mux)
	}
	return adminhttp.Guard(mux, d.cfg.AdminTokenFile, d.log)
}

// backendStatus returns the backends of scope by group, each group's in
// address order, with their ejection state at now.
func backendStatus(scope []routing.Member, now time.Time) map[string][]status.BackendStatus {
	out := map[string][]status.BackendStatus{}
	for _, m := range scope {
		b := status.BackendStatus{Address: m.B.Addr(), InFlight: m.B.InFlight(), MaxConcurrency: m.B.MaxConcurrency(), ACTLimit: m.B.ACTLimit(), SoftLimit: m.B.SoftLimit()}
		b.Ejected = m.Host != nil && m.Host.Ejected(now)
		b.Demoted = m.Demoted
		out[m.Group] = append(out[m.Group], b)
	}
	for _, bs := range out {
		slices.SortFunc(bs, func(a, b status.BackendStatus) int { return strings.Compare(a.Address, b.Address) })
	}
	return out
}

// siteStatus returns the /status entry of site, one of w's sites: its
// demand and RTTs by region name (whichever form w holds them in), and its
// row of plan p (nil: none yet) summed per region in the row's order.
func siteStatus(w waterfall.World, site waterfall.Site, p *waterfall.Plan) status.SiteStatus {
	st := status.SiteStatus{Name: site.Name, DemandRPS: site.Demand, RTTms: w.SiteRTT(site)}
	if p == nil {
		return st
	}
	if sl, ok := p.Site(site.Name); ok {
		st.UnplacedRPS = sl.Unplaced
	}
	// A row lists a region's groups together (the plan's flow order), so
	// summing runs of equal regions sums per region.
	for _, f := range p.Row(site.Name) {
		if n := len(st.Flows); n > 0 && st.Flows[n-1].Region == f.Region {
			st.Flows[n-1].LoadRPS += f.Demand
			st.Flows[n-1].Share += f.Share
			continue
		}
		st.Flows = append(st.Flows, status.FlowStatus{Region: f.Region, LoadRPS: f.Demand, Share: f.Share, Reason: f.Reason.String()})
	}
	return st
}

// Status returns the node's current state. Safe to call from any goroutine.
func (d *Daemon) Status() status.Status {
	st := status.Status{Node: d.cfg.Node, Version: version.Get(), Site: d.cfg.Site, Ready: d.Ready(), RTTms: d.rtt.Snapshot(), ControlPlane: d.streamStatus()}
	if snap := d.gossip.Snapshot(); snap != nil {
		st.Members = snap.Members
	}
	if cur := d.Snapshot(); cur != nil {
		st.UnknownFields = cur.UnknownFields
	}
	t := d.table.Load()
	if t == nil {
		return st
	}
	st.ConfigVersion = t.Version
	names := make([]string, 0, len(t.Services))
	for n := range t.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		st.Services = append(st.Services, d.serviceStatus(t.Services[n]))
	}
	return st
}

// serviceStatus returns the /status entry of service s.
func (d *Daemon) serviceStatus(s *routing.Service) status.ServiceStatus {
	m := s.Meters()
	ss := status.ServiceStatus{Name: s.Name(), Policy: string(s.Config().Policy), Decisions: map[string]int64{}, Failures: m.Failures.Load(), HerdGuard: s.Herd(), Pending: m.Pending.Load()}
	for r := range routing.NumReasons {
		ss.Decisions[r.String()] = m.Decisions[r].Load()
	}
	if det := s.Outliers(); det != nil {
		for _, h := range det.Snapshot(d.clk.Now()) {
			if h.Ejected {
				ss.Ejected = append(ss.Ejected, status.EjectedStatus{Group: h.Group, Address: h.Name, Until: h.EjectedUntil, Reason: string(h.Reason)})
			}
		}
	}
	for _, lv := range s.Priorities() {
		ss.Priorities = append(ss.Priorities, status.PriorityStatus{Regions: lv.Regions, Healthy: lv.Healthy, Instances: lv.Total, LoadPercent: lv.Load})
	}
	w := s.World()
	p := s.Plan()
	for _, site := range w.Sites {
		if site.Name == d.cfg.Site {
			ss.DemandRPS = site.Demand
		}
		ss.Sites = append(ss.Sites, siteStatus(w, site, p))
	}
	caps := s.Capacity()
	backends := backendStatus(s.Scope(), d.clk.Now())
	for _, r := range w.Regions {
		for _, g := range r.Groups {
			gs := status.GroupStatus{Name: g.Name, Region: r.Name, Zone: g.Zone, Instances: g.Instances, Healthy: g.Healthy, CapacityRPS: g.Capacity, Factor: 1, OwnFactor: 1, Signal: "none"}
			if i := slices.IndexFunc(caps, func(c routing.GroupCapacity) bool { return c.Group == g.Name }); i >= 0 {
				c := caps[i]
				gs.DeclaredRPS, gs.EffectiveRPS, gs.Factor, gs.OwnFactor, gs.Signal = c.Declared, c.Effective(), c.Factor, c.Own, c.Signal.String()
				if !c.SignalAt.IsZero() {
					at := c.SignalAt
					gs.SignalAt = &at
				}
			}
			gs.Backends = backends[g.Name]
			for _, b := range gs.Backends {
				gs.InFlight += b.InFlight
			}
			ss.Groups = append(ss.Groups, gs)
		}
	}
	if p != nil {
		for _, f := range p.Row(d.cfg.Site) {
			ss.Plan = append(ss.Plan, status.ShareStatus{Region: f.Region, Group: f.Group, Share: f.Share, Reason: f.Reason.String()})
		}
		for _, r := range p.Regions {
			rs := status.RegionStatus{Name: r.Name, CapacityRPS: r.Capacity, LoadRPS: r.Load, Utilization: r.Utilization(), Health: r.Health, Keep: r.Keep}
			for _, g := range ss.Groups {
				if g.Region == r.Name {
					rs.DeclaredRPS += g.DeclaredRPS
					rs.EffectiveRPS += g.EffectiveRPS
					rs.Instances += g.Instances
					rs.Healthy += g.Healthy
				}
			}
			ss.Regions = append(ss.Regions, rs)
		}
	}
	return ss
}
