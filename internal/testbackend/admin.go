package testbackend

import (
	"errors"
	"net/http"
	"strconv"
)

// ErrUnknownInstance is returned by Server methods given a name that no
// instance has; the process admin answers it with 404.
var ErrUnknownInstance = errors.New("unknown instance")

// adminHandler returns the handler of the process admin listener (see the
// package doc). Its routes name the instance with ?instance=NAME and work
// for every protocol; they get no delay and take no capacity.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/health", s.serveAdminGetHealth)
	mux.HandleFunc("POST /admin/health", s.serveAdminSetHealth)
	mux.HandleFunc("GET /admin/stats", s.serveAdminStats)
	mux.HandleFunc("POST /admin/close", s.serveAdminClose)
	mux.HandleFunc("POST /admin/fault", s.serveAdminFault)
	mux.HandleFunc("POST /admin/hold", s.serveAdminHold)
	mux.HandleFunc("POST /admin/slow", s.serveAdminSlow)
	return mux
}

// instanceParam returns the instance named by ?instance=, or answers 400
// (missing) or 404 (unknown) and returns nil.
func (s *Server) instanceParam(w http.ResponseWriter, r *http.Request) *instance {
	name := r.URL.Query().Get("instance")
	if name == "" {
		http.Error(w, "want ?instance=NAME", http.StatusBadRequest)
		return nil
	}
	in := s.find(name)
	if in == nil {
		http.Error(w, ErrUnknownInstance.Error()+" "+strconv.Quote(name), http.StatusNotFound)
	}
	return in
}

// serveAdminGetHealth answers GET /admin/health?instance=NAME with
// {"healthy":BOOL}.
func (s *Server) serveAdminGetHealth(w http.ResponseWriter, r *http.Request) {
	if in := s.instanceParam(w, r); in != nil {
		writeJSON(w, http.StatusOK, map[string]bool{"healthy": in.healthy.Load()})
	}
}

// serveAdminSetHealth serves POST /admin/health?instance=NAME&healthy=BOOL:
// it answers {"healthy":BOOL} once the instance's health checks see the
// change, or 500 when a tcp listener could not be reopened.
func (s *Server) serveAdminSetHealth(w http.ResponseWriter, r *http.Request) {
	in := s.instanceParam(w, r)
	if in == nil {
		return
	}
	healthy, err := strconv.ParseBool(r.URL.Query().Get("healthy"))
	if err != nil {
		http.Error(w, "want &healthy=true or &healthy=false", http.StatusBadRequest)
		return
	}
	if err := in.setHealthy(healthy); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"healthy": healthy})
}

// serveAdminStats answers GET /admin/stats?instance=NAME with that
// instance's Stats, and GET /admin/stats with a JSON array of every
// instance's Stats in configuration order.
func (s *Server) serveAdminStats(w http.ResponseWriter, r *http.Request) {
	if !r.URL.Query().Has("instance") {
		all := make([]Stats, 0, len(s.instances))
		for _, in := range s.instances {
			all = append(all, in.stats())
		}
		writeJSON(w, http.StatusOK, all)
		return
	}
	if in := s.instanceParam(w, r); in != nil {
		writeJSON(w, http.StatusOK, in.stats())
	}
}

// serveAdminClose serves POST /admin/close?instance=NAME: it closes every
// client connection of the instance and answers {"closed":N}.
func (s *Server) serveAdminClose(w http.ResponseWriter, r *http.Request) {
	if in := s.instanceParam(w, r); in != nil {
		n := in.conns.closeAll()
		in.logger.Info().Int("closed", n).Msg("connections closed by admin request")
		writeJSON(w, http.StatusOK, map[string]int{"closed": n})
	}
}

// serveAdminFault serves POST /admin/fault?instance=NAME&status=CODE: the
// instance answers every normal HTTP request with CODE (400..599) from now
// on, or normally again with 0; it answers {"status":CODE}.
func (s *Server) serveAdminFault(w http.ResponseWriter, r *http.Request) {
	in := s.instanceParam(w, r)
	if in == nil {
		return
	}
	status, err := faultParam(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	in.setFault(status)
	writeJSON(w, http.StatusOK, map[string]int{"status": status})
}

// serveAdminHold serves POST /admin/hold?instance=NAME&on=BOOL: the
// instance holds every normal HTTP request it admits from now on until the
// hold is lifted (see instance.setHold); it answers {"on":BOOL}.
func (s *Server) serveAdminHold(w http.ResponseWriter, r *http.Request) {
	if in := s.instanceParam(w, r); in != nil {
		in.serveSetHold(w, r)
	}
}
