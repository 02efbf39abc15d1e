// Command gfe is Spillway's edge node: an HTTP reverse proxy that sends each
// request to the nearest region with room (Waterfall by Region), fed by the
// control plane over gRPC and by the other nodes over gossip.
//
// Every flag can also be set from the environment as SPILLWAY_GFE_<FLAG>,
// upper-cased with dashes as underscores (SPILLWAY_GFE_SITE=nyc). The gossip
// key comes from --gossip-key-file or SPILLWAY_GOSSIP_KEY; a gossip address
// beyond loopback needs one (or --gossip-insecure).
//
// With --controlplanes the gfe takes snapshots over mutual TLS: it
// presents --tls-cert and applies snapshots only from a control plane whose
// certificate the --tls-ca bundle vouches for under --tls-server-name (or
// the host of the address dialled). Without the TLS flags it refuses to
// start unless --insecure-plaintext is given. The files are re-read at
// every handshake, so they rotate without a restart.
//
// Signals: SIGINT and SIGTERM drain and stop; SIGHUP re-reads the gossip
// keyring file (key rotation).
//
// --check-config checks the flags and each FILE named after them (or the
// --config file) as the gfe would before serving (the file: load,
// validation, every service plannable, certificate files readable),
// prints "flags: ok" and "FILE: ok" or every problem, and exits 0 when all
// pass, 1 otherwise; it binds and starts nothing.
//
// --version prints the build (module version, VCS revision and time; see
// package internal/version) and exits 0; /status shows the same.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/internal/gfe/quotaclient"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/cpclient"
	"github.com/spillway-lb/spillway/internal/daemonflags"
	"github.com/spillway-lb/spillway/internal/gfe"
	"github.com/spillway-lb/spillway/internal/gfe/poller"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/logging"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/lb/routing"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		if errors.Is(err, daemonflags.ErrCheckFailed) {
			os.Exit(1) // the problems are printed
		}
		fmt.Fprintln(os.Stderr, "gfe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	v, files, err := parseFlags(args)
	if errors.Is(err, errVersion) {
		fmt.Println(version.Line("gfe"))
		return nil
	}
	if err != nil {
		return err
	}
	if v.GetBool("check-config") {
		return checkConfig(v, args, files, os.Stdout, os.Stderr)
	}
	log, err := logging.New(os.Stderr, v.GetString("log-format"), v.GetString("log-level"), "gfe")
	if err != nil {
		return err
	}
	log.Info().Str("version", version.Get().String()).Msg("gfe starting")

	ecfg, err := edgeConfig(v)
	if err != nil {
		return err
	}

	gcfg, warnings, err := daemonflags.Gossip(gossipSettings(v, args, ecfg.Node))
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn().Msg(w)
	}

	// With TLS files the gfe seals its gossip states with its certificate
	// and believes only states sealed by a certificate that names their
	// node (mtls.GossipSeals). Incomplete TLS flags are the control-plane
	// client's to report.
	tlsFiles := mtls.Files{CA: v.GetString("tls-ca"), Cert: v.GetString("tls-cert"), Key: v.GetString("tls-key")}
	if tlsFiles.CA == "" || tlsFiles.Cert == "" || tlsFiles.Key == "" || v.GetBool("insecure-plaintext") {
		tlsFiles = mtls.Files{}
	}
	sealer, verifier, err := mtls.GossipSeals(tlsFiles, v.GetString("gossip-ca"), ecfg.Node, log.With().Str("component", "gossip").Logger())
	if err != nil {
		return err
	}
	node, err := gossip.New(gcfg, gossip.Options{Logger: log, Sealer: sealer, Verifier: verifier})
	if err != nil {
		return err
	}
	// The quota service is the control plane's, over the snapshot
	// stream's connection; the client comes after the node it feeds.
	var cpc atomic.Pointer[cpclient.Client]
	quota := func() quotaclient.Allocator {
		if c := cpc.Load(); c != nil {
			if conn := c.Conn(); conn != nil {
				return pb.NewQuotaClient(conn)
			}
		}
		return nil
	}
	// Capacity requests go over the same connection.
	capacity := func() pending.Requester {
		if c := cpc.Load(); c != nil {
			if conn := c.Conn(); conn != nil {
				return pb.NewControlPlaneClient(conn)
			}
		}
		return nil
	}
	cps := daemonflags.List(v.GetString("controlplanes"))
	// The stream's state, for /status, /readyz and metrics.
	var stream func() cpclient.Status
	if len(cps) > 0 {
		stream = func() cpclient.Status {
			if c := cpc.Load(); c != nil {
				return c.Status()
			}
			return cpclient.Status{}
		}
	}
	e, err := gfe.New(ecfg, gfe.Options{Logger: log, Gossip: node, Quota: quota, Capacity: capacity, Stream: stream})
	if err != nil {
		return err
	}
	if path := v.GetString("config"); path != "" {
		// Static bootstrap: serve from a local file until (and unless) a
		// control plane sends a snapshot.
		c, err := config.Load(path)
		if err != nil {
			return err
		}
		if err := e.ApplySnapshot(snapshot.FromConfig("file:"+path, c)); err != nil {
			return err
		}
	}
	if len(cps) == 0 && v.GetString("config") == "" {
		return errors.New("need --controlplanes or --config (or both)")
	}
	var client *cpclient.Client
	if len(cps) > 0 {
		// Built before anything runs: missing TLS flags or unusable
		// certificate files stop the gfe here.
		tls := daemonflags.ClientTLS(v.GetString("tls-ca"), v.GetString("tls-cert"), v.GetString("tls-key"),
			v.GetString("tls-server-name"), v.GetBool("insecure-plaintext"))
		if client, err = newControlPlaneClient(cps, tls, ecfg, e, log); err != nil {
			return err
		}
		cpc.Store(client)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return node.Run(ctx) })
	g.Go(func() error { return e.Run(ctx) })
	g.Go(func() error {
		return daemonflags.OnHangup(ctx, func() { daemonflags.ReloadGossipKeyFile(node, v.GetString("gossip-key-file"), log) })
	})
	if client != nil {
		g.Go(func() error { return client.Run(ctx) })
	}
	return g.Wait()
}

// edgeConfig turns the flags into the gfe's Config (not yet validated:
// gfe.New does that).
func edgeConfig(v *viper.Viper) (gfe.Config, error) {
	ecfg := gfe.DefaultConfig()
	ecfg.Node = v.GetString("node")
	ecfg.Site = v.GetString("site")
	ecfg.Listen = v.GetString("listen")
	ecfg.Admin = v.GetString("admin")
	ecfg.PlanInterval = v.GetDuration("plan-interval")
	ecfg.Damping = v.GetFloat64("damping")
	ecfg.RTTInterval = v.GetDuration("rtt-interval")
	ecfg.DemandSmoothing = v.GetDuration("demand-smoothing")
	ecfg.RTTPath = v.GetString("rtt-path")
	ecfg.DrainTimeout = v.GetDuration("drain-timeout")
	ecfg.CertCheckInterval = v.GetDuration("cert-check-interval")
	ecfg.AccessLog = v.GetBool("access-log")
	ecfg.FastPath = v.GetBool("fast-path")
	var err error
	if ecfg.Poller, err = poller.ParseMode(v.GetString("poller")); err != nil {
		return ecfg, fmt.Errorf("--poller: %w", err)
	}
	ecfg.FDReserve = v.GetInt("fd-reserve")
	ecfg.FDPerHTTPConn = v.GetInt("fd-per-http-conn")
	ecfg.PendingMax = v.GetInt("pending-max")
	ecfg.AdminTokenFile = v.GetString("admin-token-file")
	ecfg.Pprof = v.GetBool("pprof")
	ecfg.GossipBounds = routing.Bounds{
		MaxRTT:        float64(v.GetDuration("gossip-max-rtt")) / float64(time.Millisecond),
		MaxDemand:     v.GetFloat64("gossip-max-demand"),
		MaxDemandRise: v.GetFloat64("gossip-max-demand-rise"),
	}
	if s := v.GetString("source-ip"); s != "" {
		if ecfg.SourceIP, err = netip.ParseAddr(s); err != nil {
			return ecfg, fmt.Errorf("--source-ip: %w", err)
		}
	}
	if ecfg.Node == "" {
		host, _ := os.Hostname()
		ecfg.Node = host + "-" + ecfg.Listen
	}
	return ecfg, nil
}

// checkConfig is --check-config: it checks the flags as run does before it
// binds anything (the gfe's settings, the gossip key, the control-plane
// client's TLS files when --controlplanes is given; --site is not required
// to check a file), prints "flags: ok", then checks every file as --config
// would serve it (files, or the --config file) and prints "FILE: ok" or
// its problems. It starts nothing.
func checkConfig(v *viper.Viper, args, files []string, stdout, stderr io.Writer) error {
	if err := checkFlags(v, args); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "flags:", line)
		}
		return daemonflags.ErrCheckFailed
	}
	fmt.Fprintln(stdout, "flags: ok")
	if len(files) == 0 && v.GetString("config") != "" {
		files = []string{v.GetString("config")}
	}
	if len(files) == 0 {
		return nil
	}
	return daemonflags.CheckFiles(stdout, stderr, files, gfe.CheckConfigFile)
}

// checkFlags returns every problem run would find with the flags before
// it binds a socket.
func checkFlags(v *viper.Viper, args []string) error {
	ecfg, err := edgeConfig(v)
	if err != nil {
		return err
	}
	if ecfg.Site == "" {
		ecfg.Site = "check-config" // required to serve, not to check
	}
	if err := ecfg.Validate(); err != nil {
		return err
	}
	if _, _, err := daemonflags.Gossip(gossipSettings(v, args, ecfg.Node)); err != nil {
		return err
	}
	if cps := daemonflags.List(v.GetString("controlplanes")); len(cps) > 0 {
		tls := daemonflags.ClientTLS(v.GetString("tls-ca"), v.GetString("tls-cert"), v.GetString("tls-key"),
			v.GetString("tls-server-name"), v.GetBool("insecure-plaintext"))
		ccfg := cpclient.DefaultConfig()
		ccfg.Addresses, ccfg.Node, ccfg.Site, ccfg.TLS = cps, ecfg.Node, ecfg.Site, tls
		if _, err := cpclient.New(ccfg, cpclient.Options{Logger: zerolog.Nop()}); err != nil {
			return err
		}
	}
	return nil
}

// errVersion is parseFlags' answer to --version.
var errVersion = errors.New("--version")

// parseFlags defines the flags and binds them, with SPILLWAY_GFE_*
// variables, through viper, and returns them with the arguments after the
// flags (the files of --check-config). It returns errVersion for --version
// and pflag.ErrHelp for --help.
func parseFlags(args []string) (*viper.Viper, []string, error) {
	d := gfe.DefaultConfig()
	fs := pflag.NewFlagSet("gfe", pflag.ContinueOnError)
	fs.Bool("version", false, "print the version and exit")
	fs.String("node", "", "this gfe's unique name (default hostname-listen)")
	fs.String("site", "", "the edge site this gfe serves (required)")
	fs.String("listen", d.Listen, "client-facing HTTP listener (HTTP/1.1 and h2c); config listeners bind its host")
	fs.String("admin", d.Admin, "admin listener: /metrics /healthz /readyz /status (/debug/pprof with --pprof)")
	fs.String("source-ip", "", "local address of connections to backends (tells sites apart)")
	fs.String("controlplanes", "", "comma-separated control plane gRPC addresses")
	fs.String("tls-ca", "", "PEM bundle of the CAs that vouch for control planes; mutual TLS needs --tls-ca, --tls-cert and --tls-key")
	fs.String("tls-cert", "", "PEM client certificate (and chain) presented to control planes; re-read at each handshake")
	fs.String("tls-key", "", "PEM private key of --tls-cert; re-read at each handshake")
	fs.String("tls-server-name", "", "name the control planes' certificates must carry (default: the host of each address)")
	fs.Bool("insecure-plaintext", false, "take snapshots WITHOUT TLS from whoever answers; required with --controlplanes when no --tls-* flags are given")
	fs.String("admin-token-file", "", "file holding a bearer token required on every admin page but /healthz and /readyz")
	fs.Bool("pprof", false, "serve the Go profiler on the admin listener under /debug/pprof/ (never cmdline)")
	fs.String("config", "", "optional local config file to serve until a control plane answers")
	fs.Bool("check-config", false, "check the flags and the files named after them (or --config) as the gfe would before serving, print flags: ok and FILE: ok or every problem, exit 0 or 1; starts nothing")
	daemonflags.AddGossipFlags(fs, "127.0.0.1:7946")
	fs.Duration("plan-interval", d.PlanInterval, "how often to re-plan and publish state")
	fs.Float64("damping", d.Damping, "fraction of the way a plan moves toward the planner's output per interval (1 = no damping)")
	fs.Duration("demand-smoothing", d.DemandSmoothing, "time constant of the demand and load estimates")
	fs.Duration("rtt-interval", d.RTTInterval, "how often to probe each region's RTT")
	fs.String("rtt-path", d.RTTPath, "HTTP path probed for RTT")
	fs.Duration("drain-timeout", d.DrainTimeout, "how long shutdown waits for in-flight requests before it closes them (and exits 0)")
	fs.Duration("cert-check-interval", d.CertCheckInterval, "how often https listeners' certificate files are checked for changes")
	fs.Bool("access-log", false, "log every request")
	fs.Bool("fast-path", d.FastPath, "serve the --listen listener's plain HTTP/1.1 requests on the gfe's own fast path (the rest go to net/http); --fast-path=false: all on net/http; configured listeners set fast_path")
	fs.String("poller", d.Poller.String(), "when the fast path's cleartext sockets wait in the gfe's own epoll poller, which serves them in arrival order: auto (while goroutines queue for a CPU), on or off (Go's poller alone)")
	fs.Int("pending-max", d.PendingMax, "most requests waiting in the pending queue, all services together (each service's max_pending_requests bounds its own); one more is answered 429 at once")
	fs.Int("fd-per-http-conn", 2, "file descriptors each http or https client connection takes from the fd budget: 2 counts a backend connection for each, 1 only its own (for many idle keep-alive clients; BENCHMARKS.md §8)")
	fs.Int("fd-reserve", 0, "file descriptors kept free of client connections for admin, gossip, control plane and probes (0 = a tenth of RLIMIT_NOFILE, at least 256, at most half)")
	fs.Duration("gossip-max-rtt", time.Duration(d.GossipBounds.MaxRTT*float64(time.Millisecond)),
		"largest RTT believed from another gfe's gossip; higher counts as this (0: no limit)")
	fs.Float64("gossip-max-demand", d.GossipBounds.MaxDemand,
		"largest demand believed from another gfe, as a multiple of the service's declared capacity (0: no limit)")
	fs.Float64("gossip-max-demand-rise", d.GossipBounds.MaxDemandRise,
		"fastest rise believed of another gfe's demand, in the service's declared capacity per second; a new gfe starts from 0 (0: no limit)")
	fs.String("log-format", "auto", "json, console, or auto (console on a terminal)")
	fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if ok, _ := fs.GetBool("version"); ok {
		return nil, nil, errVersion
	}
	v := viper.New()
	v.SetEnvPrefix("SPILLWAY_GFE")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return nil, nil, err
	}
	return v, fs.Args(), nil
}

// newControlPlaneClient returns the client that keeps the snapshot stream
// to the control planes open and applies every pushed snapshot to the gfe.
func newControlPlaneClient(addrs []string, tls mtls.ClientConfig, cfg gfe.Config, e *gfe.Daemon, log zerolog.Logger) (*cpclient.Client, error) {
	ccfg := cpclient.DefaultConfig()
	ccfg.Addresses, ccfg.Node, ccfg.Site = addrs, cfg.Node, cfg.Site
	ccfg.BuildVersion = version.Get().String() // on the control plane's /status, per gfe
	ccfg.TLS = tls
	return cpclient.New(ccfg, cpclient.Options{
		Logger: log.With().Str("component", "cpclient").Logger(),
		Apply:  e.ApplySnapshot,
	})
}

// gossipSettings collects the gossip flags.
func gossipSettings(v *viper.Viper, args []string, node string) daemonflags.GossipSettings {
	return daemonflags.GossipSettings{
		Name: node, Addr: v.GetString("gossip-addr"), Join: v.GetString("join"),
		KeyFile: v.GetString("gossip-key-file"), Key: v.GetString("gossip-key"),
		KeyOnCommandLine: daemonflags.OnCommandLine(args, "gossip-key"), Insecure: v.GetBool("gossip-insecure"),
		AcceptUnsealed: v.GetBool("gossip-accept-unsealed"),
	}
}
