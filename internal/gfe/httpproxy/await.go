package httpproxy

// The pending queue (docs/design.md §4 and §6): what waits and what
// does not.
//
// A request waits in the queue (internal/gfe/pending) when the proxy has
// one (Options.Pending), its service has at least one backend group with
// autoscaling enabled, and either its pick failed because every backend
// is busy (routing.ErrAllBusy) or none is healthy (routing.ErrNoBackend),
// or some of the service's requests already wait (Meters.Pending: they go
// first, the queue is FIFO). Both the net/http path and the fast path wait
// (decide); a session-affinity pick is retried with the same affinity key
// and the live table's affinity.
//
// What does not wait: a drained service (ErrDrained is the operator's "no
// traffic", 503 at once), a service without an autoscaled group, retries
// (an attempt after the first picks with RetryPick and fails as before:
// the request already holds a slot's worth of waiting), and tcp
// listeners' connections.
//
// The queue is bounded: a request that finds its service's line at the
// service's max_pending_requests, or the gfe's queue at its PendingMax,
// does not wait; it is answered at once as a wait that reached its
// deadline is, 429 with the same Retry-After (msgQueueFull), and counted
// in spillway_gfe_pending_full_total.
//
// The deadline is arrival + the largest autoscaling.MaxPendingWait() of
// the service's autoscaled groups (max(min_pending_wait,
// pending_wait_cold_starts × cold_start)), and never later than arrival +
// the route's timeout. A request still waiting then is answered 429
// msgNoneFreed, with Retry-After the largest cold_start of those groups in
// whole seconds (at least 1): by then an instance asked for has had a cold
// start to come up. A net/http client that goes away stops waiting: 499,
// counted as canceled, and withdrawn from the service's demand; so does a
// fast-path client that closed its connection, which the queue checks by
// peeking at the socket (FastRequest.ClientGone) before it gives the
// request a slot and every pending.GoneEvery otherwise — else a gone
// client's request would take a freed slot ahead of live ones.

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/lb/affinity"
	"github.com/spillway-lb/spillway/lb/routing"
)

// pendingRule returns, for service sc of cfg, the longest its requests
// wait (the largest MaxPendingWait of its autoscaled groups) and the
// largest cold start of those groups; ok is false when it has no
// autoscaled group (its requests do not wait).
func pendingRule(cfg *config.Config, sc *config.Service) (wait, coldStart time.Duration, ok bool) {
	for i := range sc.Backends {
		g, found := cfg.Group(sc.Backends[i].Group)
		if !found || !g.Group.Autoscaling.Enabled() {
			continue
		}
		a := &g.Group.Autoscaling
		wait, coldStart, ok = max(wait, a.MaxPendingWait()), max(coldStart, a.ColdStart), true
	}
	return wait, coldStart, ok
}

// await handles a request of svc (in table t, by route rt) that arrived at
// start and whose pick failed with first, or that goes behind the
// service's waiting requests (first nil): it waits in the pending queue
// when the service has an autoscaled group (see the top of this file) and
// returns decide's results. The queue's goroutine picks for it (Try) from
// the live table each round.
func (p *Proxy) await(ctx context.Context, t *routing.Table, rt *config.Route, svc *routing.Service, v requestView, k routing.Flow, start time.Time, first error) (decision, refusal) {
	var areq affinity.Request
	if a := svc.Affinity(); a != nil {
		areq = affinityRequest(a, v, k)
	}
	wait, cold, ok := pendingRule(t.Config, svc.Config())
	if !ok {
		if first == nil { // queued behind waiters, but no longer autoscaled
			pk, ck, err := p.pickWith(svc, areq, k, start)
			if err == nil {
				svc.Meters().Decisions[pk.Reason].Add(1)
				return decision{route: rt, svc: svc, pick: pk, cookie: ck}, refusal{}
			}
			first = err
		}
		return decision{}, p.pickFailed(svc, first)
	}
	name, last := svc.Name(), first
	var got decision
	try := func() bool { // on the queue's goroutine; got and last are read after Wait
		t := p.planner.Table()
		if t == nil {
			return false
		}
		s := t.Services[name]
		if s == nil {
			return false
		}
		if s.Drained() {
			last = routing.ErrDrained
			return false
		}
		pk, ck, err := p.pickWith(s, areq, k, p.clk.Now())
		if err != nil {
			last = err
			return false
		}
		got = decision{route: rt, svc: s, pick: pk, cookie: ck}
		return true
	}
	deadline := start.Add(wait)
	if rt.Timeout > 0 && rt.Timeout < wait {
		deadline = start.Add(rt.Timeout)
	}
	var gone func() bool
	if fr, ok := v.(*FastRequest); ok {
		gone = fr.ClientGone
	}
	m := svc.Meters()
	result := p.pending.Wait(ctx, pending.Ticket{Service: name, Since: start, Deadline: deadline, Try: try, Gone: gone, Count: &m.Pending,
		Limit: svc.Config().MaxPendingRequests})
	switch result {
	case pending.Served:
		got.svc.Meters().Decisions[got.pick.Reason].Add(1)
		return got, refusal{}
	case pending.Canceled:
		m.Ended()
		m.Withdraw()
		p.metrics.clientErrors.WithLabelValues("canceled").Inc()
		return decision{}, refusal{status: statusClientClosed, msg: msgClientGone}
	}
	if last == nil {
		last = routing.ErrAllBusy // never tried: behind others to the end
	}
	no := p.pickFailed(svc, last)
	if no.status == http.StatusServiceUnavailable && last == routing.ErrDrained {
		return decision{}, no // drained while it waited
	}
	secs := strconv.Itoa(max(1, int((cold+time.Second-1)/time.Second)))
	if result == pending.Full {
		return decision{}, refusal{status: http.StatusTooManyRequests, msg: msgQueueFull, retryAfter: secs}
	}
	return decision{}, refusal{status: http.StatusTooManyRequests, msg: msgNoneFreed, retryAfter: secs}
}

// pickWith picks a backend of svc at now: by session affinity with areq
// when the service has one, else by its policy.
func (p *Proxy) pickWith(svc *routing.Service, areq affinity.Request, k routing.Flow, now time.Time) (routing.Pick, routing.Cookie, error) {
	if svc.Affinity() != nil {
		return svc.PickAffinity(areq, now, p.rand)
	}
	pk, err := svc.PickAt(p.rand(), k, now)
	return pk, routing.Cookie{}, err
}
