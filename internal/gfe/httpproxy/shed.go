package httpproxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/spillway-lb/spillway/lb/routing"
)

// Fast shedding of global overload (config overload, lb/shed;
// docs/design.md §3): decide refuses a request here, after quota and
// before affinity, the pending queue and the pick.

// shed refuses a request of svc at once when the service sheds global
// overload (routing.Service.Shed, config overload) and the request's draw
// falls in the refused share: 503 with the service's overload.retry_after,
// counted in spillway_gfe_shed_total{reason="overload"} and nowhere else —
// not against a backend, not as a failure. The request stays counted as
// an arrival (Meters.Started): the plan's λ must see the demand it sheds,
// or shedding would undo itself. It does not allocate when it admits.
func (p *Proxy) shed(svc *routing.Service) (refusal, bool) {
	rule := svc.Shed()
	if rule.Fraction() == 0 || rule.Admit(p.rand()) {
		return refusal{}, false
	}
	svc.Meters().Ended()
	p.metrics.shed.WithLabelValues(svc.Name(), ShedOverload).Inc()
	return refusal{status: http.StatusServiceUnavailable, msg: msgShed, retryAfter: retryAfterSeconds(svc.Config().Overload.RetryAfter)}, true
}

// retryAfterSeconds returns d as a Retry-After value: whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
