package testbackend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Options holds the dependencies of a Server.
type Options struct {
	// Clock is the time source of delays, rate limits and service times.
	// Nil means the real clock.
	Clock clock.Clock
	// Logger receives startup, shutdown and admin events (never one line
	// per request). The zero value discards them.
	Logger zerolog.Logger
	// CPUTime is the process CPU time that the load reports and stats
	// average into cores in use. Nil means ProcessCPUTime (getrusage).
	CPUTime CPUTimeFunc
}

// Server serves every instance of a Config, and the process admin listener
// if Config.AdminAddr is set. It must not be copied.
type Server struct {
	// Immutable after New.
	cfg       Config
	logger    zerolog.Logger
	instances []*instance
	frontends []frontend // frontends[i] serves instances[i]
	adminLn   net.Listener
	admin     *http.Server // nil without Config.AdminAddr
	// startup ends the emulated cold start (Config.StartupDelay); nil
	// without one.
	startup clock.Timer
}

// frontend puts one instance on the network with its protocol.
type frontend interface {
	// serve serves until shutdown or close is called, then returns nil; or
	// returns the error that stopped it. It is called at most once.
	serve() error
	// shutdown stops accepting and ends the instance's connections and
	// sessions gracefully until ctx is done, then at once. It returns once
	// none is left and serve has returned or will return nil.
	shutdown(ctx context.Context)
	// close releases the listener of a frontend whose serve was never
	// called.
	close() error
}

// New validates cfg, builds its instances and binds their listeners (and
// the admin listener), so that address errors surface here and Addr is
// known before Run. The caller must then call Run, or Close to release the
// listeners.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("testbackend: invalid config: %w", err)
	}
	clk := clock.OrReal(opts.Clock)
	s := &Server{cfg: cfg, logger: opts.Logger.With().Str("component", "testbackend").Logger()}
	for _, ic := range cfg.Instances {
		ln, err := net.Listen("tcp", ic.Addr)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("testbackend: instance %s: %w", ic.Name, err)
		}
		in := newInstance(ic, cfg.Delays, clk, s.logger)
		in.addr = ln.Addr().String()
		in.orcaMinInterval = cfg.orcaMinInterval()
		in.cpuPerRequest = cfg.CPUPerRequest
		if a, ok := antagonistFor(cfg.Antagonists, ic.Name); ok {
			in.antagonist = newAntagonistSchedule(a, ic.Name, clk.Now())
		}
		if cfg.CPUs > 0 {
			in.cpus, in.cpusSet = cfg.CPUs, true
		}
		if opts.CPUTime != nil {
			in.meter.cpuTime = opts.CPUTime
		}
		in.meter.read(clk.Now()) // the first sample: averages start at New
		fe, err := newFrontend(in, in.conns.wrap(ln))
		if err != nil {
			_ = ln.Close()
			_ = s.Close()
			return nil, fmt.Errorf("testbackend: instance %s: %w", ic.Name, err)
		}
		s.instances = append(s.instances, in)
		s.frontends = append(s.frontends, fe)
	}
	if cfg.StartupDelay > 0 {
		for _, in := range s.instances {
			if err := in.beginStartup(); err != nil {
				_ = s.Close()
				return nil, fmt.Errorf("testbackend: %w", err)
			}
		}
		s.startup = clk.AfterFunc(cfg.StartupDelay, func() {
			for _, in := range s.instances {
				in.endStartup()
			}
		})
	}
	if cfg.AdminAddr != "" {
		ln, err := net.Listen("tcp", cfg.AdminAddr)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("testbackend: admin: %w", err)
		}
		s.adminLn = ln
		s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// newFrontend returns the frontend of in's protocol on ln.
func newFrontend(in *instance, ln net.Listener) (frontend, error) {
	switch in.cfg.Proto {
	case ProtoGRPC:
		return newGRPCFrontend(in, ln), nil
	case ProtoTCP:
		return newTCPFrontend(in, ln), nil
	case ProtoH2:
		cert, err := instanceCertificate(in.cfg, in.addr)
		if err != nil {
			return nil, err
		}
		return newHTTPFrontend(in, ln, &cert), nil
	default:
		return newHTTPFrontend(in, ln, nil), nil
	}
}

// httpFrontend puts an instance of protocol http (cleartext HTTP/1.1 and
// h2c) or h2 (TLS with ALPN: h2 or http/1.1) on the network. It must not be
// copied.
type httpFrontend struct {
	// Immutable after newHTTPFrontend.
	in   *instance
	ln   net.Listener
	srv  *http.Server
	cert *tls.Certificate // nil for cleartext
}

func newHTTPFrontend(in *instance, ln net.Listener, cert *tls.Certificate) *httpFrontend {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{Handler: in, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	if cert == nil {
		protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge
	} else {
		protocols.SetHTTP2(true)
		// ServeTLS adds "h2" and "http/1.1" to NextProtos for ALPN.
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	}
	return &httpFrontend{in: in, ln: ln, srv: srv, cert: cert}
}

func (f *httpFrontend) serve() error {
	var err error
	if f.cert != nil {
		err = f.srv.ServeTLS(f.ln, "", "")
	} else {
		err = f.srv.Serve(f.ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// shutdown closes open WebSockets with StatusGoingAway, lets admitted
// requests finish until ctx is done and then closes every connection.
func (f *httpFrontend) shutdown(ctx context.Context) {
	f.in.stop()
	if err := f.srv.Shutdown(ctx); err != nil {
		f.in.logger.Warn().Err(err).Msg("graceful shutdown timed out; closing connections")
		_ = f.srv.Close()
	}
	// http.Server does not wait for hijacked connections (WebSockets).
	if f.in.sessions.wait(ctx) != nil {
		f.in.conns.closeAll()
		_ = f.in.sessions.wait(context.Background())
	}
}

func (f *httpFrontend) close() error {
	f.in.stop()
	return f.ln.Close()
}

// find returns the named instance, or nil.
func (s *Server) find(name string) *instance {
	for _, in := range s.instances {
		if in.cfg.Name == name {
			return in
		}
	}
	return nil
}

// Addr returns the address the named instance listens on (with the port
// the system chose if its Addr had port 0), or "" if there is no such
// instance.
func (s *Server) Addr(name string) string {
	if in := s.find(name); in != nil {
		return in.addr
	}
	return ""
}

// AdminAddr returns the address of the process admin listener (with the
// port the system chose if Config.AdminAddr had port 0), or "" without one.
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Certificate returns the TLS certificate of the named h2 instance, loaded
// or self-signed, so that a client can trust it (a self-signed one is its
// own CA: add it to the client's RootCAs); nil for other protocols or no
// such instance.
func (s *Server) Certificate(name string) *x509.Certificate {
	for i, in := range s.instances {
		if in.cfg.Name != name {
			continue
		}
		if f, ok := s.frontends[i].(*httpFrontend); ok && f.cert != nil {
			return f.cert.Leaf
		}
	}
	return nil
}

// Stats returns the counters of the named instance, the same as its
// GET /admin/stats, and false if there is no such instance.
func (s *Server) Stats(name string) (Stats, bool) {
	if in := s.find(name); in != nil {
		return in.stats(), true
	}
	return Stats{}, false
}

// SetHealthy makes the named instance pass (true) or fail (false) its
// health checks, the same as POST /admin/health: /healthz for http and h2,
// the grpc.health.v1 status for grpc, the listener for tcp. It fails for an
// unknown instance or when a tcp listener cannot be reopened.
func (s *Server) SetHealthy(name string, healthy bool) error {
	in := s.find(name)
	if in == nil {
		return fmt.Errorf("testbackend: %w: %q", ErrUnknownInstance, name)
	}
	if err := in.setHealthy(healthy); err != nil {
		return fmt.Errorf("testbackend: %w", err)
	}
	return nil
}

// CloseConns closes every client connection of the named instance, the
// same as POST /admin/close, and returns how many it closed, or -1 for an
// unknown instance.
func (s *Server) CloseConns(name string) int {
	if in := s.find(name); in != nil {
		return in.conns.closeAll()
	}
	return -1
}

// Run serves every instance until ctx is done or one of them fails, then
// shuts all of them down gracefully: it stops accepting and waits up to
// Config.ShutdownTimeout for admitted requests to finish before closing
// their connections (see the package doc for streams). It returns nil after
// a shutdown caused by ctx, or the first serve error. Run must be called at
// most once.
func (s *Server) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, fe := range s.frontends {
		in := s.instances[i]
		s.logger.Info().Str("instance", in.cfg.Name).Str("addr", in.addr).Str("proto", string(in.cfg.Proto)).
			Str("region", in.cfg.Region).Str("zone", in.cfg.Zone).Msg("listening")
		g.Go(func() error {
			if err := fe.serve(); err != nil {
				return fmt.Errorf("testbackend: instance %s: serve: %w", in.cfg.Name, err)
			}
			return nil
		})
	}
	if s.admin != nil {
		s.logger.Info().Str("addr", s.AdminAddr()).Msg("admin listening")
		g.Go(func() error {
			if err := s.admin.Serve(s.adminLn); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("testbackend: admin: serve: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		s.shutdown()
		return nil
	})
	err := g.Wait()
	s.logger.Info().Msg("stopped")
	return err
}

// shutdown stops every frontend, in parallel, within one shared deadline,
// then the admin listener.
func (s *Server) shutdown() {
	if s.startup != nil {
		s.startup.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, fe := range s.frontends {
		wg.Go(func() { fe.shutdown(sctx) })
	}
	wg.Wait()
	if s.admin != nil {
		if err := s.admin.Shutdown(sctx); err != nil {
			_ = s.admin.Close()
		}
	}
}

// Close releases the listeners of a Server whose Run was never called.
func (s *Server) Close() error {
	if s.startup != nil {
		s.startup.Stop()
	}
	var errs []error
	for _, fe := range s.frontends {
		if err := fe.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.adminLn != nil {
		if err := s.adminLn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
