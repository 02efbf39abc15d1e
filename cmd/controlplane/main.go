// Command controlplane is Spillway's control plane (docs/design.md §5): it
// loads the operator configuration (YAML, hot-reloaded), health-checks the
// backends (sharing the checks with the other replicas over gossip), and
// streams versioned snapshots of configuration and health to every gfe over
// gRPC.
//
// Usage:
//
//	controlplane --check-config FILE...
//	controlplane --config configs/demo.yaml [--listen 127.0.0.1:7000]
//	    (--tls-ca CA.pem --tls-cert CERT.pem --tls-key KEY.pem
//	     --tls-allowed-clients '*.gfe.example' | --insecure-plaintext)
//	    [--grpc-reflection] [--admin 127.0.0.1:7100] [--admin-token-file FILE]
//	    [--pprof] [--node NAME] [--gossip-addr 127.0.0.1:7946]
//	    [--join host:port,...] [--gossip-key-file PATH] [--gossip-insecure]
//	    [--replicas cp-1,cp-2,...] [--xds-listen ADDR --xds-allowed-clients ID=SITE[+SITE][/SVC[+SVC]],...
//	     [--xds-plan-interval 500ms] [--xds-damping 0.5] [--xds-envoy-listen 0.0.0.0:10000]
//	     [--xds-load-report-interval 1s] [--xds-max-site-demand 1]
//	     [--xds-max-streams 10000] [--xds-max-streams-per-client 256]
//	     [--xds-max-snapshots 512] [--xds-snapshot-grace 30s]]
//	    [--autoscale-provider process|exec --autoscale-command CMD
//	     [--autoscale-ports 9300-9399] [--autoscale-host 127.0.0.1]
//	     [--autoscale-drain-timeout 10s] [--autoscale-exec-timeout 5m]
//	     [--autoscale-tick 1s] [--autoscale-drain-delay 5s] [--autoscale-lease-ttl 10s]]
//	    [--log-format auto|json|console]
//	    [--log-level info]
//
// The gossip key can also come from SPILLWAY_GOSSIP_KEY; a gossip address
// beyond loopback needs one (or --gossip-insecure).
//
// The gRPC API is served with mutual TLS: only clients whose certificate
// the --tls-ca bundle vouches for and whose DNS/URI SAN or CN matches
// --tls-allowed-clients get a snapshot (which carries the configuration's
// secrets). Without the TLS flags the control plane refuses to start
// unless --insecure-plaintext is given; it then serves in clear text with
// every secret redacted. The certificate files are re-read at every
// handshake, so they rotate without a restart (see package mtls).
//
// With --xds-listen the control plane also serves the plan over xDS (package
// internal/xdsexport): each Envoy or gRPC client gets its site's plan row
// as locality weights. The listener uses the same CA, certificate and key
// as the control-plane gRPC, with its own allow list,
// --xds-allowed-clients, whose every entry grants a certificate identity
// its sites (and, optionally, the services it sees):
// 'xds-nyc.xds.example=nyc,*.lon.xds.example=lon/web+api'. A client's
// bootstrap node.locality.region only picks among its sites; a claim of
// another site is refused (PERMISSION_DENIED), so no client can add demand
// to, or read the plan of, a site it is not granted. The --xds-max-*
// flags bound what xDS clients can make the control plane hold.
//
// With --autoscale-provider the control plane runs the autoscaler of every
// instance group with an autoscaling block (package
// internal/autoscale/controller): one replica per group at a time, by a
// lease over gossip. It starts instances through the provider — local
// processes from the --autoscale-command template over .Name, .Address,
// .Host, .Port, .Group, .Region, .Zone and .Index, or an operator's hook —
// adds them to their group in the snapshots it serves, answers the gfes'
// RequestCapacity, and drains and stops the instances the rules stop.
//
// Every flag can also be set from the environment as SPILLWAY_CP_<FLAG>,
// upper-cased with dashes as underscores (SPILLWAY_CP_GOSSIP_ADDR=...); a flag
// on the command line wins. (Variables SPILLWAY_REGIONS_*, SPILLWAY_SERVICES_*
// and SPILLWAY_ROUTES_* override fields of the configuration file itself; see
// package config.)
//
// Signals: SIGINT and SIGTERM stop the daemon (snapshot streams end with
// UNAVAILABLE so gfes move to another replica; gossip leaves the cluster);
// SIGHUP re-reads the configuration file, the secret files it names
// (cookie_secret_file) and the gossip keyring file at once.
//
// --check-config loads and validates each FILE named after it (or the
// --config file) exactly as the daemon loads its configuration, prints
// "FILE: ok" or every problem with its file and field path, and exits 0
// when every file passes, 1 otherwise; it starts nothing.
//
// --version prints the build (module version, VCS revision and time; see
// package internal/version) and exits 0; /status shows the same.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/internal/autoscale/provider"
	"github.com/spillway-lb/spillway/internal/controlplane"
	"github.com/spillway-lb/spillway/internal/daemonflags"
	"github.com/spillway-lb/spillway/internal/logging"
	"github.com/spillway-lb/spillway/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		if errors.Is(err, daemonflags.ErrCheckFailed) {
			os.Exit(1) // the problems are printed
		}
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	v, files, err := parseFlags(args)
	if errors.Is(err, errVersion) {
		fmt.Println(version.Line("controlplane"))
		return nil
	}
	if err != nil {
		return err
	}
	if v.GetBool("check-config") {
		if len(files) == 0 && v.GetString("config") != "" {
			files = []string{v.GetString("config")}
		}
		return daemonflags.CheckFiles(os.Stdout, os.Stderr, files, controlplane.CheckConfig)
	}
	log, err := logging.New(os.Stderr, v.GetString("log-format"), v.GetString("log-level"), "controlplane")
	if err != nil {
		return err
	}
	cfg, warnings, err := daemonConfig(v, args)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn().Msg(w)
	}
	d, err := controlplane.New(cfg, controlplane.Options{Logger: log})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range d.Components() {
		g.Go(func() error {
			if err := c.Run(ctx); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
			return nil
		})
	}
	g.Go(func() error { return reloadOnHangup(ctx, d, v.GetString("gossip-key-file"), log) })
	log.Info().Str("node", cfg.NodeName).Str("version", version.Get().String()).Str("config_version", d.Config().Version).Msg("control plane started")
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info().Msg("control plane stopped")
	return nil
}

// reloadOnHangup reloads the configuration, and the gossip keyring file
// when there is one (key rotation), on every SIGHUP until ctx is done.
func reloadOnHangup(ctx context.Context, d *controlplane.Daemon, keyFile string, log zerolog.Logger) error {
	return daemonflags.OnHangup(ctx, func() {
		log.Info().Msg("SIGHUP: reloading config")
		d.Reload() // logs its outcome
		if keyFile != "" {
			daemonflags.ReloadGossipKeyFile(d.GossipNode(), keyFile, log)
		}
	})
}

// errVersion is parseFlags' answer to --version.
var errVersion = errors.New("--version")

// parseFlags defines the flags and binds them, with SPILLWAY_CP_* variables,
// through viper, and returns them with the arguments left after the flags
// (only --check-config takes any: the files). It returns errVersion for
// --version and pflag.ErrHelp for --help.
func parseFlags(args []string) (*viper.Viper, []string, error) {
	d := controlplane.DefaultConfig()
	fs := pflag.NewFlagSet("controlplane", pflag.ContinueOnError)
	fs.Bool("version", false, "print the version and exit")
	fs.String("config", "", "operator configuration YAML file, watched and hot-reloaded (required)")
	fs.Bool("check-config", false, "check the files named after the flags (or --config) as the daemon would load them, print FILE: ok or every problem with its field path, exit 0 or 1; starts nothing")
	fs.String("listen", d.ListenAddr, "gRPC listen address (ControlPlane service, gRPC health; reflection with --grpc-reflection)")
	fs.String("tls-ca", "", "PEM bundle of the CAs that vouch for clients (gfes); mutual TLS needs --tls-ca, --tls-cert, --tls-key and --tls-allowed-clients")
	fs.String("tls-cert", "", "PEM certificate (and chain) the gRPC listener presents; re-read at each handshake")
	fs.String("tls-key", "", "PEM private key of --tls-cert; re-read at each handshake")
	fs.String("tls-allowed-clients", "", `comma-separated client identities served (DNS/URI SANs or CN; "*.suffix" for one label; "*" for any the CA vouches for)`)
	fs.Bool("insecure-plaintext", false, "serve gRPC WITHOUT TLS (secrets redacted); required when no --tls-* flags are given")
	fs.Bool("grpc-reflection", false, "register the gRPC reflection service")
	fs.Float64("quota-error-rate", 0, "fraction of AllocateQuota calls failed on purpose with UNAVAILABLE, so that gfes' fail-open path stays exercised (0..0.5)")
	fs.String("quota-redis", "", "host:port of the Redis that keeps quota counters shared by every replica (empty: counters in this replica's memory, right for one replica only)")
	fs.String("quota-redis-password-file", "", "file whose first line is the password of --quota-redis (AUTH / requirepass); re-read for every new connection, so it rotates without a restart")
	fs.String("quota-redis-tls-ca", "", "PEM bundle of the CAs that vouch for --quota-redis's certificate: talk TLS to Redis (re-read for every new connection)")
	fs.String("quota-redis-tls-cert", "", "PEM client certificate presented to Redis (its tls-auth-clients); with --quota-redis-tls-key")
	fs.String("quota-redis-tls-key", "", "PEM private key of --quota-redis-tls-cert")
	fs.String("quota-redis-tls-server-name", "", "name Redis's certificate must carry (default: the host of --quota-redis)")
	fs.Duration("quota-redis-timeout", 20*time.Millisecond, "bound on every Redis call (dial, write, read); slower calls fail and gfes fail open")
	fs.String("admin", d.AdminAddr, "admin HTTP listen address: /metrics /healthz /readyz /status (/debug/pprof with --pprof)")
	fs.String("admin-token-file", "", "file holding a bearer token required on every admin page but /healthz and /readyz")
	fs.Bool("pprof", false, "serve the Go profiler on the admin listener under /debug/pprof/ (never cmdline)")
	fs.String("node", "", "this replica's unique name in gossip and snapshots (default hostname-listen)")
	daemonflags.AddGossipFlags(fs, "127.0.0.1:7946")
	fs.String("replicas", "", "comma-separated node names of the control-plane replicas that share health checks with "+
		"this one (this replica's name may be listed); gossip members claiming to be control planes under other "+
		"names are ignored. Empty: this replica checks every group itself")
	fs.String("xds-listen", "", "serve the plan over xDS (ADS) at this address, for Envoy and proxyless gRPC clients; empty: off")
	fs.String("xds-allowed-clients", "", `comma-separated grants of the xDS clients served, each IDENTITY=SITE[+SITE...][/SERVICE[+SERVICE...]]: `+
		`a client whose certificate has IDENTITY (as --tls-allowed-clients) is at one of the SITEs (its node.locality.region must name one, or `+
		`none when there is one) and sees only the SERVICEs (default all); IDENTITY=* trusts the site each client claims. `+
		`A claim of another site is refused. The listener presents --tls-cert`)
	fs.Duration("xds-plan-interval", d.XDS.PlanInterval, "how often the xDS export re-plans from gossip and pushes changes")
	fs.Float64("xds-damping", d.XDS.Damping, "fraction of the way the xDS plan moves toward the newest plan per interval, as the gfe's --damping (0,1]")
	fs.String("xds-envoy-listen", d.XDS.EnvoyListen, "host:port of the listener served to Envoy clients (node.user_agent_name envoy)")
	fs.Duration("xds-load-report-interval", d.XDS.LoadReportInterval, "how often xDS clients report their calls (LRS), which the plan counts as their site's demand; 0 = no load reporting")
	fs.Float64("xds-max-site-demand", d.XDS.MaxSiteDemand, "bound on a site's xDS demand for a service, summed over every xDS client at the site, as a fraction of the service's declared capacity; the excess is counted and logged, not planned")
	fs.Int("xds-max-streams", d.XDS.Limits.MaxStreams, "xDS and LRS streams open at once from all clients; more are refused (RESOURCE_EXHAUSTED)")
	fs.Int("xds-max-streams-per-client", d.XDS.Limits.MaxStreamsPerClient, "xDS and LRS streams open at once from one client certificate identity (IP address in plain text)")
	fs.Int("xds-max-snapshots", d.XDS.Limits.MaxKeys, "snapshots held for xDS clients (per kind, site and visible services) besides the plan's sites'; past it the one idle longest is dropped, or the stream refused")
	fs.Duration("xds-snapshot-grace", d.XDS.Limits.KeyGrace, "how long a snapshot no xDS stream uses is kept (and rebuilt every plan interval) before it is dropped")
	fs.String("autoscale-provider", "", "run the autoscaler of the groups with an autoscaling block: process (local processes from --autoscale-command) or exec (--autoscale-command per scale event); empty: off")
	fs.String("autoscale-command", "", `the instance command (process: argv templates over .Name .Address .Host .Port .Group .Region .Zone .Index) or the hook (exec); a JSON array, or words split at spaces`)
	fs.String("autoscale-ports", "", "FIRST-LAST: the ports process instances listen on")
	fs.String("autoscale-host", "127.0.0.1", "the host of process instances' addresses")
	fs.Duration("autoscale-drain-timeout", 10*time.Second, "how long a stopped process instance may drain after SIGTERM before it is killed")
	fs.Duration("autoscale-exec-timeout", 5*time.Minute, "bound on one run of the exec hook")
	fs.Duration("autoscale-tick", time.Second, "how often the autoscaling rules run")
	fs.Duration("autoscale-drain-delay", 5*time.Second, "how long an instance is out of the snapshot before it is stopped")
	fs.Duration("autoscale-lease-ttl", 10*time.Second, "how long a group's autoscaler lease outlives its holder's last renewal (and the wait before a starting replica takes any)")
	fs.String("log-format", "auto", "json, console, or auto (console on a terminal)")
	fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if ok, _ := fs.GetBool("version"); ok {
		return nil, nil, errVersion
	}
	if check, _ := fs.GetBool("check-config"); fs.NArg() > 0 && !check {
		return nil, nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	v := viper.New()
	v.SetEnvPrefix("SPILLWAY_CP")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return nil, nil, err
	}
	return v, fs.Args(), nil
}

// daemonConfig turns the flags into the daemon's Config, with warnings to
// log. args are the command-line arguments (a key on them draws a warning).
func daemonConfig(v *viper.Viper, args []string) (controlplane.Config, []string, error) {
	cfg := controlplane.DefaultConfig()
	cfg.ConfigPath = v.GetString("config")
	cfg.ListenAddr = v.GetString("listen")
	cfg.AdminAddr = v.GetString("admin")
	cfg.AdminTokenFile = v.GetString("admin-token-file")
	cfg.Pprof = v.GetBool("pprof")
	cfg.GRPCReflection = v.GetBool("grpc-reflection")
	cfg.QuotaErrorRate = v.GetFloat64("quota-error-rate")
	cfg.QuotaRedis.Addr = v.GetString("quota-redis")
	cfg.QuotaRedis.PasswordFile = v.GetString("quota-redis-password-file")
	cfg.QuotaRedis.TLS.CA = v.GetString("quota-redis-tls-ca")
	cfg.QuotaRedis.TLS.Cert = v.GetString("quota-redis-tls-cert")
	cfg.QuotaRedis.TLS.Key = v.GetString("quota-redis-tls-key")
	cfg.QuotaRedis.TLSServerName = v.GetString("quota-redis-tls-server-name")
	cfg.QuotaRedis.Timeout = v.GetDuration("quota-redis-timeout")
	cfg.TLS = daemonflags.ServerTLS(v.GetString("tls-ca"), v.GetString("tls-cert"), v.GetString("tls-key"),
		v.GetString("tls-allowed-clients"), v.GetBool("insecure-plaintext"))
	cfg.XDS.Listen = v.GetString("xds-listen")
	cfg.XDS.AllowedClients = daemonflags.List(v.GetString("xds-allowed-clients"))
	cfg.XDS.PlanInterval = v.GetDuration("xds-plan-interval")
	cfg.XDS.Damping = v.GetFloat64("xds-damping")
	cfg.XDS.EnvoyListen = v.GetString("xds-envoy-listen")
	cfg.XDS.LoadReportInterval = v.GetDuration("xds-load-report-interval")
	cfg.XDS.MaxSiteDemand = v.GetFloat64("xds-max-site-demand")
	cfg.XDS.Limits.MaxStreams = v.GetInt("xds-max-streams")
	cfg.XDS.Limits.MaxStreamsPerClient = v.GetInt("xds-max-streams-per-client")
	cfg.XDS.Limits.MaxKeys = v.GetInt("xds-max-snapshots")
	cfg.XDS.Limits.KeyGrace = v.GetDuration("xds-snapshot-grace")
	as, err := autoscaleConfig(v)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Autoscale = as
	cfg.NodeName = v.GetString("node")
	if cfg.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return cfg, nil, fmt.Errorf("--node not set and no hostname: %w", err)
		}
		cfg.NodeName = host + "-" + cfg.ListenAddr
	}
	g, warnings, err := daemonflags.Gossip(daemonflags.GossipSettings{
		Name: cfg.NodeName, Addr: v.GetString("gossip-addr"), Join: v.GetString("join"),
		KeyFile: v.GetString("gossip-key-file"), Key: v.GetString("gossip-key"),
		KeyOnCommandLine: daemonflags.OnCommandLine(args, "gossip-key"), Insecure: v.GetBool("gossip-insecure"),
		AcceptUnsealed: v.GetBool("gossip-accept-unsealed"), Profile: v.GetString("gossip-profile"),
	})
	if err != nil {
		return cfg, nil, err
	}
	cfg.Gossip = g
	cfg.Replicas = daemonflags.List(v.GetString("replicas"))
	cfg.GossipCA = v.GetString("gossip-ca")
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	return cfg, warnings, nil
}

// autoscaleConfig reads the --autoscale-* flags.
func autoscaleConfig(v *viper.Viper) (controlplane.AutoscaleConfig, error) {
	c := controlplane.AutoscaleConfig{
		Provider:     v.GetString("autoscale-provider"),
		Host:         v.GetString("autoscale-host"),
		DrainTimeout: v.GetDuration("autoscale-drain-timeout"),
		ExecTimeout:  v.GetDuration("autoscale-exec-timeout"),
		Tick:         v.GetDuration("autoscale-tick"),
		DrainDelay:   v.GetDuration("autoscale-drain-delay"),
		LeaseTTL:     v.GetDuration("autoscale-lease-ttl"),
	}
	if cmd := strings.TrimSpace(v.GetString("autoscale-command")); strings.HasPrefix(cmd, "[") {
		if err := json.Unmarshal([]byte(cmd), &c.Command); err != nil {
			return c, fmt.Errorf("--autoscale-command: not a JSON array of strings: %w", err)
		}
	} else {
		c.Command = strings.Fields(cmd)
	}
	if ports := v.GetString("autoscale-ports"); ports != "" {
		first, last, ok := strings.Cut(ports, "-")
		a, err1 := strconv.Atoi(first)
		b, err2 := strconv.Atoi(last)
		if !ok || err1 != nil || err2 != nil {
			return c, fmt.Errorf("--autoscale-ports: want FIRST-LAST, got %q", ports)
		}
		c.Ports = provider.PortRange{First: a, Last: b}
	}
	return c, nil
}
