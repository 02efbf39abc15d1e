package topology

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
)

func TestBackendArgs(t *testing.T) {
	spec := Spec{
		Net:     7,
		Regions: []Region{{Name: "r1", Zones: []string{"b"}, Instances: 2, Rate: 40}, {Name: "r2", Zones: []string{"b", "c"}, Instances: 1, Rate: 40, MaxRPS: 50}},
		Sites:   []Site{{Name: "s1", RTT: map[string]time.Duration{"r1": 5 * time.Millisecond}}},
	}
	spec.defaults()
	tests := []struct {
		name   string
		region int
		want   []string
	}{
		{
			name:   "enforces Rate",
			region: 0,
			want: []string{
				"--max-rps", "40", "--burst", "2", "--max-concurrency", "0", "--queue", "64", "--service-time", "2ms",
				"--delay", "127.7.1.0/24=5ms",
				"--instance", "name=r1-b-1,addr=127.7.101.1:9001,region=r1,zone=r1-b",
				"--instance", "name=r1-b-2,addr=127.7.101.1:9002,region=r1,zone=r1-b",
			},
		},
		{
			name:   "MaxRPS overrides the enforced rate; no RTT rule without an RTT",
			region: 1,
			want: []string{
				"--max-rps", "50", "--burst", "2", "--max-concurrency", "0", "--queue", "64", "--service-time", "2ms",
				"--instance", "name=r2-b-1,addr=127.7.102.1:9001,region=r2,zone=r2-b",
				"--instance", "name=r2-c-1,addr=127.7.102.1:9011,region=r2,zone=r2-c",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, spec.backendArgs(tt.region)); diff != "" {
				t.Errorf("backendArgs(%d) (-want +got):\n%s", tt.region, diff)
			}
		})
	}
	// Instance keys and the process admin.
	keyed := spec
	keyed.BackendAdmin = true
	keyed.Regions = []Region{{Name: "r1", Zones: []string{"b"}, Instances: 1, Rate: 40, InstanceKeys: ",proto=tcp",
		BackendArgs: []string{"--antagonist", "r1-b-1:period=4s,slowdown=3x"}}}
	want := []string{
		"--max-rps", "40", "--burst", "2", "--max-concurrency", "0", "--queue", "64", "--service-time", "2ms",
		"--delay", "127.7.1.0/24=5ms",
		"--instance", "name=r1-b-1,addr=127.7.101.1:9001,region=r1,zone=r1-b,proto=tcp",
		"--admin", "127.7.101.1:9999",
		"--antagonist", "r1-b-1:period=4s,slowdown=3x",
	}
	if diff := cmp.Diff(want, keyed.backendArgs(0)); diff != "" {
		t.Errorf("backendArgs with InstanceKeys, BackendAdmin and BackendArgs (-want +got):\n%s", diff)
	}
	// The config declares Rate whatever the backend enforces.
	if y := spec.ConfigYAML(); strings.Count(y, "max_rate_per_instance: 40}") != 3 || strings.Contains(y, "max_rate_per_instance: 50") {
		t.Errorf("ConfigYAML() declares other than Rate:\n%s", y)
	}
}

// TestTLSArgs: by default every daemon gets a certificate from the
// cluster's CA (mutual TLS on); InsecurePlaintext gives the explicit flag.
func TestTLSArgs(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	if err := c.makePKI(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv, err := c.tlsArgs("cp-1", true, "127.7.0.1", "cp-1.cp.spillway.internal")
	if err != nil {
		t.Fatal(err)
	}
	pki := c.PKIDir + "/"
	want := []string{"--tls-ca", pki + "ca.crt", "--tls-cert", pki + "cp-1.crt", "--tls-key", pki + "cp-1.key", "--tls-allowed-clients", "*.gfe.spillway.internal"}
	if d := cmp.Diff(want, srv); d != "" {
		t.Errorf("control plane TLS args (-want +got):\n%s", d)
	}
	cl, err := c.tlsArgs("gfe-nyc-1", false, "gfe-nyc-1"+GFEIdentitySuffix)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl) != 6 || strings.Contains(strings.Join(cl, " "), "allowed") {
		t.Errorf("gfe TLS args = %q, want CA, cert and key only", cl)
	}
	p := &Cluster{Dir: t.TempDir(), Spec: Spec{InsecurePlaintext: true}}
	if err := p.makePKI(context.Background()); err != nil || p.CA != nil {
		t.Fatalf("makePKI in plain text: CA %v, %v; want none", p.CA, err)
	}
	if args, _ := p.tlsArgs("cp-1", true); len(args) != 1 || args[0] != "--insecure-plaintext" {
		t.Errorf("plain-text args = %q, want [--insecure-plaintext]", args)
	}
}

// TestPinControlPlanes: with PinControlPlanes the n-th gfe gets only
// control plane n mod ControlPlanes; without, every gfe gets them all.
func TestPinControlPlanes(t *testing.T) {
	for _, tt := range []struct {
		name string
		pin  bool
		want []string
	}{
		{"pinned", true, []string{"127.9.0.1:7000", "127.9.0.2:7000", "127.9.0.1:7000"}},
		{"all", false, []string{"127.9.0.1:7000,127.9.0.2:7000", "127.9.0.1:7000,127.9.0.2:7000", "127.9.0.1:7000,127.9.0.2:7000"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Net: 9, ControlPlanes: 2, PinControlPlanes: tt.pin, InsecurePlaintext: true,
				Sites: []Site{{Name: "nyc", GFEs: 3}}}
			c := &Cluster{Spec: spec, CPAddrs: []string{"127.9.0.1:7000", "127.9.0.2:7000"}}
			var got []string
			for g := 1; g <= 3; g++ {
				gf, err := c.newGFE(0, g, nil)
				if err != nil {
					t.Fatal(err)
				}
				c.GFEs = append(c.GFEs, gf)
				args := gf.Args()
				for i, a := range args {
					if a == "--controlplanes" {
						got = append(got, args[i+1])
					}
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("--controlplanes of 3 gfes (-want +got):\n%s", d)
			}
		})
	}
	if got := (&Spec{Net: 9}).RedisAddr(); got != "127.9.0.100:6379" {
		t.Errorf("RedisAddr = %q, want 127.9.0.100:6379", got)
	}
}

// TestConfigYAMLServiceOptions: LoadAware and Shed write the service's
// load_aware and overload blocks, which the config takes with every other
// key at its default; without them both stay off.
func TestConfigYAMLServiceOptions(t *testing.T) {
	for _, tt := range []struct {
		name            string
		loadAware, shed bool
		admit           float64
	}{
		{"none", false, false, 0},
		{"load_aware", true, false, 0},
		{"shed", false, true, 0},
		{"both", true, true, 0},
		{"shed admitting 0.9", false, true, 0.9},
		{"admit without shed", false, false, 0.9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := Uneven(7, DefaultUnevenAntagonist)
			spec.LoadAware, spec.Shed, spec.ShedAdmit = tt.loadAware, tt.shed, tt.admit
			cfg, err := config.Parse([]byte(spec.ConfigYAML()), "spillway.yaml")
			if err != nil {
				t.Fatalf("Parse(ConfigYAML()): %v", err)
			}
			svc := cfg.Services[0]
			la, ov := config.DefaultLoadAware(), config.DefaultOverload()
			la.Enabled, ov.Shed = tt.loadAware, tt.shed
			if tt.shed && tt.admit > 0 {
				ov.Admit = tt.admit
			}
			if diff := cmp.Diff(la, svc.LoadAware); diff != "" {
				t.Errorf("load_aware (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(ov, svc.Overload); diff != "" {
				t.Errorf("overload (-want +got):\n%s", diff)
			}
		})
	}
}
