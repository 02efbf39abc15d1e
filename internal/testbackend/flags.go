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
//	                       plus optional max_concurrency, max_rps, burst, queue, service_time
//	--max-concurrency N    default slots per instance (4; 0 = unlimited)
//	--max-rps R            default requests/s per instance (0 = unlimited)
//	--burst N              default token-bucket size for --max-rps (1)
//	--queue N              default queue bound per instance (16)
//	--service-time D       default time a request holds its slot (2ms)
//	--delay [REGION:]CIDR=RTT   emulated RTT to callers in CIDR (repeatable)
//	--shutdown-timeout D   graceful shutdown bound (5s)
//
// The capacity flags are defaults for every instance; keys in an --instance
// spec override them for that instance, whatever the order of the flags. On
// -h it writes the usage to output and returns flag.ErrHelp. It writes
// nothing else; errors are returned.
func ParseFlags(args []string, output io.Writer) (Config, error) {
	cfg := DefaultConfig()
	defaults := DefaultCapacity()
	var specs []string

	fs := flag.NewFlagSet("testbackend", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("instance", "an instance, `SPEC` = name=N,addr=HOST:PORT,region=R,zone=Z[,max_concurrency=N,max_rps=R,burst=N,queue=N,service_time=D] (repeatable)",
		func(s string) error { specs = append(specs, s); return nil })
	fs.IntVar(&defaults.MaxConcurrency, "max-concurrency", defaults.MaxConcurrency, "requests served at once per instance (0 = unlimited)")
	fs.Float64Var(&defaults.MaxRPS, "max-rps", defaults.MaxRPS, "requests started per second per instance (0 = unlimited)")
	fs.IntVar(&defaults.Burst, "burst", defaults.Burst, "token-bucket size of --max-rps: requests that may start back to back")
	fs.IntVar(&defaults.Queue, "queue", defaults.Queue, "requests that may wait for a slot or token per instance; more are rejected with 503")
	fs.DurationVar(&defaults.ServiceTime, "service-time", defaults.ServiceTime, "time a request holds its slot")
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

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(output)
			fmt.Fprintln(output, "usage: testbackend --instance SPEC [--instance SPEC ...] [flags]")
			fs.PrintDefaults()
		}
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
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
