package testbackend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/internal/clock"
)

// Options holds the dependencies of a Server.
type Options struct {
	// Clock is the time source of delays, rate limits and service times.
	// Nil means the real clock.
	Clock clock.Clock
	// Logger receives startup, shutdown and admin events (never one line
	// per request). The zero value discards them.
	Logger zerolog.Logger
}

// Server serves every instance of a Config. It must not be copied.
type Server struct {
	// Immutable after New.
	cfg       Config
	logger    zerolog.Logger
	instances []*instance
	listeners []net.Listener
	servers   []*http.Server
}

// New validates cfg, builds its instances and binds their listeners, so
// that address errors surface here and Addr is known before Run. The caller
// must then call Run, or Close to release the listeners.
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
		protocols := new(http.Protocols)
		protocols.SetHTTP1(true)
		protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		s.instances = append(s.instances, in)
		s.listeners = append(s.listeners, ln)
		s.servers = append(s.servers, &http.Server{
			Handler:           in,
			Protocols:         protocols,
			ReadHeaderTimeout: 10 * time.Second,
		})
	}
	return s, nil
}

// Addr returns the address the named instance listens on (with the port
// the system chose if its Addr had port 0), or "" if there is no such
// instance.
func (s *Server) Addr(name string) string {
	for i, in := range s.instances {
		if in.cfg.Name == name {
			return s.listeners[i].Addr().String()
		}
	}
	return ""
}

// Stats returns the counters of the named instance, the same as its
// GET /admin/stats, and false if there is no such instance.
func (s *Server) Stats(name string) (Stats, bool) {
	for _, in := range s.instances {
		if in.cfg.Name == name {
			return in.stats(), true
		}
	}
	return Stats{}, false
}

// Run serves every instance until ctx is done or one of them fails, then
// shuts all of them down gracefully: it stops accepting and waits up to
// Config.ShutdownTimeout for admitted requests to finish before closing
// their connections. It returns nil after a shutdown caused by ctx, or the
// first serve error. Run must be called at most once.
func (s *Server) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, srv := range s.servers {
		ln, in := s.listeners[i], s.instances[i]
		s.logger.Info().Str("instance", in.cfg.Name).Str("addr", ln.Addr().String()).
			Str("region", in.cfg.Region).Str("zone", in.cfg.Zone).Msg("listening")
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("testbackend: instance %s: serve: %w", in.cfg.Name, err)
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

// shutdown stops every server gracefully within one shared deadline.
func (s *Server) shutdown() {
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	for i, srv := range s.servers {
		if err := srv.Shutdown(sctx); err != nil {
			s.logger.Warn().Err(err).Str("instance", s.instances[i].cfg.Name).
				Msg("graceful shutdown timed out; closing connections")
			_ = srv.Close()
		}
	}
}

// Close releases the listeners of a Server whose Run was never called.
func (s *Server) Close() error {
	var errs []error
	for _, ln := range s.listeners {
		if err := ln.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
