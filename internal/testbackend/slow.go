package testbackend

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// The admin's slowdown: POST /admin/slow?slowdown=F multiplies the
// instance's service time and CPU per request by F from now on, until
// slowdown=1, as an antagonist does but when a test says, not on a
// schedule. It applies on top of an --antagonist's window.

// maxSlowdown bounds ?slowdown=.
const maxSlowdown = 1000

// slowParam reads ?slowdown=F, a factor in [1, maxSlowdown] (1 = off).
func slowParam(r *http.Request) (float64, error) {
	f, err := strconv.ParseFloat(r.URL.Query().Get("slowdown"), 64)
	if err != nil || !(f >= 1 && f <= maxSlowdown) {
		return 0, fmt.Errorf("want ?slowdown=F with F in [1, %d] (1 ends the slowdown)", maxSlowdown)
	}
	return f, nil
}

// setSlowdown makes every request, unary RPC and stream message that
// starts from now on take f times its service time and CPU (f = 1: normal
// again); they count in Stats.Antagonized while f > 1.
func (in *instance) setSlowdown(f float64) {
	in.slowdown.Store(math.Float64bits(f))
	in.logger.Info().Float64("slowdown", f).Msg("slowdown set by admin request")
}

// slowFactor returns the admin's slowdown, 1 when none is set.
func (in *instance) slowFactor() float64 {
	if b := in.slowdown.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// serveSetSlow serves POST /admin/slow?slowdown=F (see setSlowdown); it
// answers {"slowdown":F}.
func (in *instance) serveSetSlow(w http.ResponseWriter, r *http.Request) {
	f, err := slowParam(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	in.setSlowdown(f)
	writeJSON(w, http.StatusOK, map[string]float64{"slowdown": f})
}

// serveAdminSlow serves POST /admin/slow?instance=NAME&slowdown=F on the
// process admin.
func (s *Server) serveAdminSlow(w http.ResponseWriter, r *http.Request) {
	if in := s.instanceParam(w, r); in != nil {
		in.serveSetSlow(w, r)
	}
}
