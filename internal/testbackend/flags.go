package testbackend

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ParseFlags parses the command line of cmd/testbackend (args without the
// program name) into a validated Config:
//
//	--instance SPEC        an instance (repeat for more): name=N,addr=HOST:PORT,region=R,zone=Z
//	                       plus optional proto (http|h2|grpc|tcp), cert, key (h2 only),
//	                       max_concurrency, max_rps, burst, queue, service_time, load_reports
//	--max-concurrency N    default slots per instance (4; 0 = unlimited)
//	--max-rps R            default requests/s per instance (0 = unlimited)
//	--burst N              default token-bucket size for --max-rps (1)
//	--queue N              default queue bound per instance (16)
//	--service-time D       default time a request holds its slot (2ms)
//	--load-reports BOOL    default for every instance: send ORCA load reports (true)
//	--orca-min-interval D  shortest interval of out-of-band ORCA reports on grpc instances (100ms)
//	--delay [REGION:]CIDR=RTT   emulated RTT to callers in CIDR (repeatable)
//	--shutdown-timeout D   graceful shutdown bound (5s)
//	--admin HOST:PORT      process admin listener (/admin/{health,stats,close}?instance=NAME; none by default)
//	--startup-delay D      emulated cold start: health checks fail until D after start (0)
//	--cpu-per-request D    CPU time of busy work per normal request and unary RPC (0)
//	--cpus F               cores the process may use: when set, cpu_utilization = cores in use / F
//	--antagonist [INSTANCE:]period=D[,duty=F][,slowdown=Nx][,cpu=D][,phase=D][,seed=N]
//	                       slow instances down on a schedule (repeatable; see ParseAntagonist)
//
// The capacity flags and --load-reports are defaults for every instance;
// keys in an --instance spec override them for that instance, whatever the
// order of the flags. On -h it writes the usage to output and returns
// flag.ErrHelp; on --version it returns ErrVersion (the caller prints the
// version). It writes nothing else; errors are returned.
// ErrVersion is ParseFlags' answer to --version.
var ErrVersion = errors.New("testbackend: --version")

func ParseFlags(args []string, output io.Writer) (Config, error) {
	cfg := DefaultConfig()
	defaults := InstanceConfig{Capacity: DefaultCapacity()}
	loadReports := true
	var specs []string

	fs := flag.NewFlagSet("testbackend", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("instance", "an instance, `SPEC` = name=N,addr=HOST:PORT,region=R,zone=Z[,proto=http|h2|grpc|tcp,cert=FILE,key=FILE,max_concurrency=N,max_rps=R,burst=N,queue=N,service_time=D,load_reports=BOOL] (repeatable; proto defaults to http = HTTP/1.1 + h2c + WebSocket at /ws; h2 = TLS with ALPN, self-signed unless cert and key are given; grpc = gRPC health + spillway.testing.v1.Echo; tcp = echo after a hello line)",
		func(s string) error { specs = append(specs, s); return nil })
	fs.IntVar(&defaults.Capacity.MaxConcurrency, "max-concurrency", defaults.Capacity.MaxConcurrency, "requests (or open streams) served at once per instance (0 = unlimited)")
	fs.Float64Var(&defaults.Capacity.MaxRPS, "max-rps", defaults.Capacity.MaxRPS, "requests started per second per instance (0 = unlimited)")
	fs.IntVar(&defaults.Capacity.Burst, "burst", defaults.Capacity.Burst, "token-bucket size of --max-rps: requests that may start back to back")
	fs.IntVar(&defaults.Capacity.Queue, "queue", defaults.Capacity.Queue, "requests that may wait for a slot or token per instance; more are rejected with 503")
	fs.DurationVar(&defaults.Capacity.ServiceTime, "service-time", defaults.Capacity.ServiceTime, "time a request holds its slot")
	fs.BoolVar(&loadReports, "load-reports", loadReports, "send ORCA load reports: the Endpoint-Load-Metrics header on every answer to a normal HTTP request, per-call trailers and the OpenRcaService on grpc (instance key load_reports overrides)")
	fs.DurationVar(&cfg.ORCAMinInterval, "orca-min-interval", cfg.ORCAMinInterval, "shortest interval between two out-of-band ORCA load reports on one OpenRcaService stream of a grpc instance")
	fs.Func("delay", "`[REGION:]CIDR=RTT`: emulated RTT to callers whose source address is in CIDR, for instances of REGION only if given (repeatable; longest prefix wins)",
		func(s string) error {
			r, err := ParseDelayRule(s)
			if err != nil {
				return err
			}
			cfg.Delays = append(cfg.Delays, r)
			return nil
		})
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long to let admitted requests finish on SIGTERM/SIGINT")
	fs.DurationVar(&cfg.StartupDelay, "startup-delay", cfg.StartupDelay, "emulated cold start: every instance fails its health check (/healthz 503, gRPC NOT_SERVING, tcp listener closed) until this long after start, then passes it")
	fs.DurationVar(&cfg.CPUPerRequest, "cpu-per-request", cfg.CPUPerRequest, "CPU time of busy work that each normal request and unary RPC spends holding its slot, before --service-time")
	fs.Float64Var(&cfg.CPUs, "cpus", cfg.CPUs, "cores the process may use: when set (> 0), the load reports' cpu_utilization is the process's cores in use over the last second / cpus; 0 keeps cpu_utilization = application_utilization")
	fs.Func("antagonist", "`[INSTANCE:]period=D[,duty=F][,slowdown=Nx][,cpu=D][,phase=D][,seed=N]`: an antagonist that, for duty (default 0.5, or a percentage) of every period, multiplies service time and CPU per request by slowdown and adds cpu of busy work per request, on every instance or only INSTANCE; seed places each period's window at random, repeatably (repeatable; an instance takes the last rule naming it, else the last without a name)",
		func(s string) error {
			r, err := ParseAntagonist(s)
			if err != nil {
				return err
			}
			cfg.Antagonists = append(cfg.Antagonists, r)
			return nil
		})
	printVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&cfg.AdminAddr, "admin", cfg.AdminAddr, "`HOST:PORT` of the process admin listener, for every protocol: GET|POST /admin/health?instance=NAME[&healthy=BOOL], GET /admin/stats[?instance=NAME], POST /admin/close?instance=NAME (default none)")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(output)
			fmt.Fprintln(output, "usage: testbackend --instance SPEC [--instance SPEC ...] [flags]")
			fs.PrintDefaults()
		}
		return Config{}, err
	}
	if *printVersion {
		return Config{}, ErrVersion
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	defaults.NoLoadReports = !loadReports
	for _, spec := range specs {
		inst, err := ParseInstance(spec, defaults)
		if err != nil {
			return Config{}, err
		}
		cfg.Instances = append(cfg.Instances, inst)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
