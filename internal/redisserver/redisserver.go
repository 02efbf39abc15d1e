// Package redisserver runs a real redis-server (Debian's package) as a child
// process on a loopback address, without persistence, for the tests, the
// quota benchmark and any deployment topology that shares quota counters
// in Redis. It can kill, stall (SIGSTOP) and restart it, to prove that the
// quota service fails open fast and recovers.
package redisserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-lb/spillway/internal/proc"
)

// Tools is what a caller of Start must have installed (command → Debian
// package), for testkit.EnsureTools.
var Tools = map[string]string{"redis-server": "redis-server"}

// Options for Start.
type Options struct {
	// Addr is host:port to listen on. Required.
	Addr string
	// Dir is the working directory (no data is written: no RDB, no AOF).
	// Required.
	Dir string
	// Password, when set, is required from clients (requirepass).
	Password string
	// Tee receives the server's log, prefixed "redis | ".
	Tee io.Writer
	// TLS, when set, serves TLS only, on Addr (no plain-text port).
	TLS *TLS
}

// TLS is a TLS listener's PEM files and client authentication.
type TLS struct {
	// CA vouches for client certificates; Cert and Key are the server's.
	// Cert must also allow client authentication (devpki's do): the
	// readiness probe of Start presents it.
	CA, Cert, Key string
	// AuthClients requires a client certificate the CA vouches for
	// (tls-auth-clients yes); false asks for none (tls-auth-clients no).
	AuthClients bool
}

// Server is a running redis-server. Safe for concurrent use of Kill,
// Stall, Resume and Stop; Restart must not run concurrently with them.
type Server struct {
	Addr string
	opts Options
	p    *proc.Proc
}

// Start starts redis-server and waits (up to 10 s) until it answers PING.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redisserver: redis-server not installed (apt-get install -y redis-server): %w", err)
	}
	s := &Server{Addr: opts.Addr, opts: opts}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	host, port, err := net.SplitHostPort(s.opts.Addr)
	if err != nil {
		return fmt.Errorf("redisserver: addr: %w", err)
	}
	if err := os.MkdirAll(s.opts.Dir, 0o755); err != nil {
		return err
	}
	args := []string{
		"--bind", host, "--dir", s.opts.Dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--logfile", "",
		"--pidfile", filepath.Join(s.opts.Dir, "redis.pid"),
	}
	var tlsCfg *tls.Config
	if t := s.opts.TLS; t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		args = append(args, "--port", "0", "--tls-port", port, "--tls-cert-file", t.Cert, "--tls-key-file", t.Key,
			"--tls-ca-cert-file", t.CA, "--tls-auth-clients", auth)
		if tlsCfg, err = probeTLS(t); err != nil {
			return err
		}
	} else {
		args = append(args, "--port", port)
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	p, err := proc.Start("redis", "redis-server", proc.Options{Tee: s.opts.Tee}, args...)
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	s.p = p
	c := redis.NewClient(&redis.Options{Addr: s.opts.Addr, Password: s.opts.Password, TLSConfig: tlsCfg, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("redisserver: redis-server exited: %v\n%s", p.Err(), p.Output())
		case <-ctx.Done():
			p.Kill()
			return fmt.Errorf("redisserver: no PONG from %s within 10s\n%s", s.opts.Addr, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probeTLS returns the TLS configuration of the readiness probe: t's CA
// as the roots, t's own certificate as the client's.
func probeTLS(t *TLS) (*tls.Config, error) {
	ca, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("redisserver: tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("redisserver: tls: no certificate in %s", t.CA)
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("redisserver: tls: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// Kill kills the server at once, as a crash would; its data is lost.
func (s *Server) Kill() { s.p.Kill() }

// Stall stops the server (SIGSTOP): connections stay open and new ones are
// accepted by the kernel, but nothing is answered until Resume.
func (s *Server) Stall() error { return s.p.Signal(syscall.SIGSTOP) }

// Resume continues a stalled server (SIGCONT).
func (s *Server) Resume() error { return s.p.Signal(syscall.SIGCONT) }

// Restart starts the server again at the same address after Kill (empty).
func (s *Server) Restart(ctx context.Context) error { return s.start(ctx) }

// Stop stops the server (resuming it first if stalled).
func (s *Server) Stop() {
	_ = s.Resume()
	_ = s.p.Stop(5 * time.Second)
}
