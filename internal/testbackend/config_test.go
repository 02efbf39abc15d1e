package testbackend

import (
	"errors"
	"flag"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDelayRule(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    DelayRule
		wantErr bool
	}{
		{name: "global", in: "127.0.1.0/24=5ms", want: DelayRule{Prefix: netip.MustParsePrefix("127.0.1.0/24"), RTT: 5 * time.Millisecond}},
		{name: "region", in: "eu-west:127.0.2.0/24=80ms", want: DelayRule{Region: "eu-west", Prefix: netip.MustParsePrefix("127.0.2.0/24"), RTT: 80 * time.Millisecond}},
		{name: "masked", in: "127.0.1.7/24=1s", want: DelayRule{Prefix: netip.MustParsePrefix("127.0.1.0/24"), RTT: time.Second}},
		{name: "zero", in: "127.0.0.0/8=0s", want: DelayRule{Prefix: netip.MustParsePrefix("127.0.0.0/8")}},
		{name: "ipv6", in: "::1/128=2ms", want: DelayRule{Prefix: netip.MustParsePrefix("::1/128"), RTT: 2 * time.Millisecond}},
		{name: "region ipv6", in: "asia:fd00::/8=3ms", want: DelayRule{Region: "asia", Prefix: netip.MustParsePrefix("fd00::/8"), RTT: 3 * time.Millisecond}},
		{name: "no rtt", in: "127.0.1.0/24", wantErr: true},
		{name: "bad rtt", in: "127.0.1.0/24=fast", wantErr: true},
		{name: "negative rtt", in: "127.0.1.0/24=-1ms", wantErr: true},
		{name: "bad prefix", in: "127.0.1.0=5ms", wantErr: true},
		{name: "empty region", in: ":127.0.1.0/24=5ms", wantErr: true},
		{name: "region bad prefix", in: "eu-west:nowhere=5ms", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDelayRule(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseDelayRule(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ParseDelayRule(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if !tt.wantErr {
				if again, err := ParseDelayRule(got.String()); err != nil || again != got {
					t.Errorf("ParseDelayRule(%q.String() = %q) = %v, %v, want the same rule", tt.in, got.String(), again, err)
				}
			}
		})
	}
}

func TestDelayTableLookup(t *testing.T) {
	rules := []DelayRule{
		mustRule(t, "127.0.0.0/16=20ms"),
		mustRule(t, "127.0.1.0/24=5ms"),
		mustRule(t, "eu-west:127.0.1.0/24=80ms"),
		mustRule(t, "us-east:127.0.2.0/24=1ms"),
		mustRule(t, "127.0.3.0/24=7ms"),
		mustRule(t, "eu-west:127.0.3.128/25=9ms"),
	}
	tests := []struct {
		name   string
		region string
		addr   string
		want   time.Duration
	}{
		{name: "global /24", region: "us-east", addr: "127.0.1.5", want: 5 * time.Millisecond},
		{name: "region beats global of same length", region: "eu-west", addr: "127.0.1.5", want: 80 * time.Millisecond},
		{name: "own region rule", region: "us-east", addr: "127.0.2.9", want: time.Millisecond},
		{name: "other region rule ignored", region: "eu-west", addr: "127.0.2.9", want: 20 * time.Millisecond},
		{name: "shorter prefix", region: "eu-west", addr: "127.0.0.1", want: 20 * time.Millisecond},
		{name: "longer region prefix", region: "eu-west", addr: "127.0.3.200", want: 9 * time.Millisecond},
		{name: "outside the longer prefix", region: "eu-west", addr: "127.0.3.100", want: 7 * time.Millisecond},
		{name: "ipv4-mapped", region: "us-east", addr: "::ffff:127.0.1.5", want: 5 * time.Millisecond},
		{name: "no rule", region: "us-east", addr: "10.0.0.1", want: 0},
		{name: "invalid addr", region: "us-east", addr: "", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addr netip.Addr
			if tt.addr != "" {
				addr = netip.MustParseAddr(tt.addr)
			}
			if got := NewDelayTable(rules, tt.region).Lookup(addr); got != tt.want {
				t.Errorf("Lookup(%s) in %s = %v, want %v", tt.addr, tt.region, got, tt.want)
			}
		})
	}
}

func mustRule(t *testing.T, s string) DelayRule {
	t.Helper()
	r, err := ParseDelayRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseFlags(t *testing.T) {
	def := DefaultCapacity()
	tests := []struct {
		name          string
		args          []string
		want          Config
		wantErrSubstr string
	}{
		{
			name: "two instances, defaults and overrides in any order",
			args: []string{
				"--instance", "name=a,addr=127.0.0.1:9101,region=us-east,zone=us-east-b",
				"--instance", "name=b, addr=127.0.0.1:9102, region=us-east, zone=us-east-c, max_concurrency=8, max_rps=50, burst=5, queue=0, service_time=10ms",
				"--max-concurrency", "2", "--queue", "3", "--service-time", "1ms",
				"--delay", "127.0.1.0/24=5ms", "-delay=eu-west:127.0.2.0/24=80ms",
				"--shutdown-timeout", "1s",
			},
			want: Config{
				Instances: []InstanceConfig{
					{Name: "a", Addr: "127.0.0.1:9101", Region: "us-east", Zone: "us-east-b",
						Capacity: Capacity{MaxConcurrency: 2, Burst: def.Burst, Queue: 3, ServiceTime: time.Millisecond}},
					{Name: "b", Addr: "127.0.0.1:9102", Region: "us-east", Zone: "us-east-c",
						Capacity: Capacity{MaxConcurrency: 8, MaxRPS: 50, Burst: 5, Queue: 0, ServiceTime: 10 * time.Millisecond}},
				},
				Delays: []DelayRule{
					{Prefix: netip.MustParsePrefix("127.0.1.0/24"), RTT: 5 * time.Millisecond},
					{Region: "eu-west", Prefix: netip.MustParsePrefix("127.0.2.0/24"), RTT: 80 * time.Millisecond},
				},
				ShutdownTimeout: time.Second,
				ORCAMinInterval: DefaultORCAMinInterval,
			},
		},
		{
			name: "antagonists",
			args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--antagonist", "period=20s,slowdown=4x", "--antagonist", "a:period=10s,duty=30%,cpu=1ms,seed=3"},
			want: Config{
				Instances: []InstanceConfig{{Name: "a", Addr: ":0", Region: "r", Zone: "z", Capacity: def}},
				Antagonists: []AntagonistRule{
					{Antagonist: Antagonist{Period: 20 * time.Second, Duty: 0.5, Slowdown: 4}},
					{Instance: "a", Antagonist: Antagonist{Period: 10 * time.Second, Duty: 0.3, Slowdown: 1, CPU: time.Millisecond, Seeded: true, Seed: 3}},
				},
				ShutdownTimeout: DefaultConfig().ShutdownTimeout,
				ORCAMinInterval: DefaultORCAMinInterval,
			},
		},
		{
			name:          "antagonist naming no instance",
			args:          []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--antagonist", "b:period=20s,slowdown=4x"},
			wantErrSubstr: `antagonists[0].instance: no instance is named "b"`,
		},
		{
			name:          "bad antagonist",
			args:          []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--antagonist", "period=20s"},
			wantErrSubstr: "the antagonist changes nothing",
		},
		{
			name: "defaults",
			args: []string{"--instance", "name=a,addr=:0,region=r,zone=z"},
			want: Config{
				Instances:       []InstanceConfig{{Name: "a", Addr: ":0", Region: "r", Zone: "z", Capacity: def}},
				ShutdownTimeout: DefaultConfig().ShutdownTimeout,
				ORCAMinInterval: DefaultORCAMinInterval,
			},
		},
		{
			name: "protocols and admin",
			args: []string{
				"--instance", "name=h,addr=127.0.0.1:9101,region=r,zone=z,proto=h2,cert=/c.pem,key=/k.pem",
				"--instance", "name=g,addr=127.0.0.1:9102,region=r,zone=z,proto=grpc",
				"--instance", "name=t,addr=127.0.0.1:9103,region=r,zone=z,proto=tcp",
				"--instance", "name=p,addr=127.0.0.1:9104,region=r,zone=z,proto=http",
				"--admin", "127.0.0.1:9100",
			},
			want: Config{
				Instances: []InstanceConfig{
					{Name: "h", Addr: "127.0.0.1:9101", Region: "r", Zone: "z", Proto: ProtoH2, CertFile: "/c.pem", KeyFile: "/k.pem", Capacity: def},
					{Name: "g", Addr: "127.0.0.1:9102", Region: "r", Zone: "z", Proto: ProtoGRPC, Capacity: def},
					{Name: "t", Addr: "127.0.0.1:9103", Region: "r", Zone: "z", Proto: ProtoTCP, Capacity: def},
					{Name: "p", Addr: "127.0.0.1:9104", Region: "r", Zone: "z", Proto: ProtoHTTP, Capacity: def},
				},
				ShutdownTimeout: DefaultConfig().ShutdownTimeout,
				ORCAMinInterval: DefaultORCAMinInterval,
				AdminAddr:       "127.0.0.1:9100",
			},
		},
		{
			name: "load reports: flag default, instance key overrides",
			args: []string{
				"--instance", "name=a,addr=127.0.0.1:9101,region=r,zone=z",
				"--instance", "name=b,addr=127.0.0.1:9102,region=r,zone=z,load_reports=true",
				"--load-reports=false", "--orca-min-interval", "1s",
			},
			want: Config{
				Instances: []InstanceConfig{
					{Name: "a", Addr: "127.0.0.1:9101", Region: "r", Zone: "z", Capacity: def, NoLoadReports: true},
					{Name: "b", Addr: "127.0.0.1:9102", Region: "r", Zone: "z", Capacity: def},
				},
				ShutdownTimeout: DefaultConfig().ShutdownTimeout,
				ORCAMinInterval: time.Second,
			},
		},
		{
			name: "load reports off for one instance",
			args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,load_reports=false"},
			want: Config{
				Instances:       []InstanceConfig{{Name: "a", Addr: ":0", Region: "r", Zone: "z", Capacity: def, NoLoadReports: true}},
				ShutdownTimeout: DefaultConfig().ShutdownTimeout,
				ORCAMinInterval: DefaultORCAMinInterval,
			},
		},
		{name: "bad load_reports", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,load_reports=maybe"}, wantErrSubstr: "load_reports: strconv.ParseBool"},
		{name: "negative orca interval", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--orca-min-interval", "-1s"}, wantErrSubstr: "orca_min_interval: must be >= 0, got -1s"},
		{name: "unknown proto", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,proto=udp"}, wantErrSubstr: `instances[0].proto: unknown protocol "udp" (want one of http|h2|grpc|tcp)`},
		{name: "cert without key", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,proto=h2,cert=c.pem"}, wantErrSubstr: `instances[0]: cert and key must be given together (cert "c.pem", key "")`},
		{name: "cert for grpc", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,proto=grpc,cert=c.pem,key=k.pem"}, wantErrSubstr: "instances[0].cert: only for proto h2, got proto grpc"},
		{name: "cert for default proto", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,cert=c.pem,key=k.pem"}, wantErrSubstr: "instances[0].cert: only for proto h2, got proto http"},
		{name: "bad admin", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--admin", "nohost"}, wantErrSubstr: "admin_addr: address nohost: missing port"},
		{name: "admin on an instance", args: []string{"--instance", "name=a,addr=127.0.0.1:1,region=r,zone=z", "--admin", "127.0.0.1:1"}, wantErrSubstr: `admin_addr: "127.0.0.1:1" already used by instances[0]`},
		{name: "no instance", args: nil, wantErrSubstr: "instances: at least one instance is required"},
		{name: "unknown key", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,cpu=2"}, wantErrSubstr: `unknown key "cpu"`},
		{name: "not key=value", args: []string{"--instance", "a"}, wantErrSubstr: `"a" is not key=value`},
		{name: "repeated key", args: []string{"--instance", "name=a,name=b"}, wantErrSubstr: "key name given twice"},
		{name: "bad number", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z,queue=many"}, wantErrSubstr: "queue: strconv.Atoi"},
		{name: "missing zone", args: []string{"--instance", "name=a,addr=:0,region=r"}, wantErrSubstr: "instances[0].zone: must not be empty"},
		{name: "bad addr", args: []string{"--instance", "name=a,addr=nohost,region=r,zone=z"}, wantErrSubstr: "instances[0].addr: address nohost: missing port"},
		{
			name:          "duplicate name and addr",
			args:          []string{"--instance", "name=a,addr=127.0.0.1:1,region=r,zone=z", "--instance", "name=a,addr=127.0.0.1:1,region=r,zone=z"},
			wantErrSubstr: `instances[1].name: "a" already used by instances[0]`,
		},
		{name: "negative queue", args: []string{"--queue", "-1", "--instance", "name=a,addr=:0,region=r,zone=z"}, wantErrSubstr: "instances[0].capacity.queue: must be >= 0, got -1"},
		{name: "rps without burst", args: []string{"--max-rps", "10", "--burst", "0", "--instance", "name=a,addr=:0,region=r,zone=z"}, wantErrSubstr: "instances[0].capacity.burst: must be >= 1 when max_rps is set"},
		{name: "duplicate delay", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--delay", "127.0.1.0/24=1ms", "--delay", "127.0.1.9/24=2ms"}, wantErrSubstr: "delays[1]: 127.0.1.0/24=2ms repeats the prefix of delays[0]"},
		{name: "bad delay", args: []string{"--delay", "127.0.1.0/24"}, wantErrSubstr: "want [REGION:]CIDR=RTT"},
		{name: "negative startup delay", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--startup-delay", "-1s"}, wantErrSubstr: "startup_delay: -1s is negative"},
		{name: "negative cpu per request", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--cpu-per-request", "-2ms"}, wantErrSubstr: "cpu_per_request: -2ms is negative"},
		{name: "negative cpus", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--cpus", "-1"}, wantErrSubstr: "cpus: -1 is not a finite number >= 0"},
		{
			name: "cold start and CPU cost",
			args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "--startup-delay", "3s", "--cpu-per-request", "2ms", "--cpus", "1.5"},
			want: Config{
				Instances:       []InstanceConfig{{Name: "a", Addr: ":0", Region: "r", Zone: "z", Capacity: def}},
				ShutdownTimeout: 5 * time.Second,
				ORCAMinInterval: DefaultORCAMinInterval,
				StartupDelay:    3 * time.Second,
				CPUPerRequest:   2 * time.Millisecond,
				CPUs:            1.5,
			},
		},
		{name: "positional", args: []string{"--instance", "name=a,addr=:0,region=r,zone=z", "extra"}, wantErrSubstr: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFlags(tt.args, io.Discard)
			if tt.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
					t.Fatalf("ParseFlags(%q) error = %v, want it to contain %q", tt.args, err, tt.wantErrSubstr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFlags(%q): %v", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ParseFlags(%q) mismatch (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	var out strings.Builder
	_, err := ParseFlags([]string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseFlags(-h) error = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"usage: testbackend", "-instance", "-delay", "-max-concurrency", "-max-rps", "-queue", "-service-time",
		"-admin", "proto=http|h2|grpc|tcp", "cert=FILE", "/admin/close?instance=NAME", "-load-reports", "load_reports=BOOL", "-orca-min-interval"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage does not mention %q:\n%s", want, out.String())
		}
	}
}

// TestValidateJoinsErrors checks that Validate reports every problem at once.
func TestValidateJoinsErrors(t *testing.T) {
	cfg := Config{
		Instances: []InstanceConfig{{Name: "a", Capacity: Capacity{MaxConcurrency: -1, ServiceTime: -time.Second}}},
		Delays:    []DelayRule{{RTT: -time.Millisecond}},
	}
	err := cfg.Validate()
	for _, want := range []string{
		"instances[0].addr: must not be empty",
		"instances[0].region: must not be empty",
		"instances[0].zone: must not be empty",
		"instances[0].capacity.max_concurrency: must be >= 0, got -1",
		"instances[0].capacity.service_time: must be >= 0, got -1s",
		"delays[0].prefix: invalid prefix",
		"delays[0].rtt: must be >= 0, got -1ms",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}
