package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// ignoreIndex compares Configs by their decoded fields only.
var ignoreIndex = cmpopts.IgnoreUnexported(Config{})

// badFiles pairs every testdata/*.bad.yaml with the problems it must report:
// each string must appear in exactly one reported error, prefixed by the file
// name, and no other error may be reported.
var badFiles = []struct {
	file     string
	wantErrs []string
}{
	{"unknown_top_key.bad.yaml", []string{
		`servces: unknown field (did you mean "services"?)`,
	}},
	{"unknown_key_in_list.bad.yaml", []string{
		`services[0].polcy: unknown field (did you mean "policy"?)`,
		`services[0].backends[0].capcity_scaler: unknown field (did you mean "capacity_scaler"?)`,
		`routes[0].paht_prefix: unknown field (did you mean "path_prefix"?)`,
	}},
	{"unknown_key_deep.bad.yaml", []string{
		`regions[0].zones[0].groups[0].instances[0].adress: unknown field (did you mean "address"?)`,
		`services[0].health_check.intervall: unknown field (did you mean "interval"?)`,
		`services[0].session_affinity.ttl: unknown field`,
		`regions[0].zones[0].groups[0].instances[0].address: required`,
	}},
	{"wrong_types.bad.yaml", []string{
		`regions[0].zones[0].groups[0].instances[0].max_concurrency: expected an integer, got number 2.5`,
		`regions[0].zones[0].groups[1].instances: expected a list, got a map`,
		`routes[0].host: expected a string (quote the value), got number 8080`,
		`services[0].backends[0].capacity_scaler: expected a number, got string "full"`,
		`services[0].health_check.interval: expected a duration such as "5s", got number 5`,
		`services[0].health_check.timeout: expected a duration such as "5s", got string "soon"`,
		`services[1]: expected a map, got number 42`,
	}},
	{"duplicate_names.bad.yaml", []string{
		`regions[1].name: duplicate region name "r1" (first at regions[0])`,
		`regions[1].zones[0].name: duplicate zone name "z1" (first at regions[0].zones[0])`,
		`regions[1].zones[0].groups[0].name: duplicate instance group name "g1" (first at regions[0].zones[0].groups[0])`,
		`regions[1].zones[0].groups[0].instances[0].address: duplicate address "127.0.0.1:9001"`,
		`services[1].name: duplicate service name "web" (first at services[0])`,
		`routes[1]: duplicate route for host "*" and path_prefix "/" (first at routes[0])`,
	}},
	{"unknown_group.bad.yaml", []string{
		`services[1].backends[0].group: unknown instance group "eu-west-x"`,
		`services[1].backends[2].group: instance group "eu-west-b-web" is already a backend of this service (at services[1].backends[1])`,
	}},
	{"unknown_service.bad.yaml", []string{
		`routes[0].service: unknown service "api"`,
		`routes[1].service: required`,
	}},
	{"bad_enums.bad.yaml", []string{
		`services[0].policy: must be one of waterfall, min_rtt, round_robin, least_request, envoy_priority, hash2, hash3, hash5, prequal; got "rr"`,
		`services[0].balancing_mode: must be one of RATE, CONNECTION, UTILIZATION; got "rate"`,
		`services[0].session_affinity.type: must be one of none, client_ip, client_ip_proto, client_ip_port_proto, generated_cookie, http_cookie, header; got "cookie"`,
		`services[0].health_check.protocol: must be one of http, https, tcp, grpc; got "icmp"`,
	}},
	{"rate_limits.bad.yaml", []string{
		`services[0].backends[0]: balancing_mode RATE requires exactly one of max_rate_per_instance, max_rate`,
		`services[0].backends[1]: balancing_mode RATE takes exactly one of max_rate_per_instance, max_rate, got max_rate_per_instance and max_rate`,
		`services[0].backends[2].max_connections: not valid with balancing_mode RATE (it is a CONNECTION limit)`,
	}},
	{"connection_limits.bad.yaml", []string{
		`services[0].backends[0].max_rate_per_instance: not valid with balancing_mode CONNECTION (it is a RATE limit)`,
		`services[0].backends[0]: balancing_mode CONNECTION requires exactly one of max_connections_per_instance, max_connections`,
		`services[0].backends[1].max_connections_per_instance: must be a finite number > 0, got -5`,
		`services[0].backends[2].max_utilization: not valid with balancing_mode CONNECTION (it is a UTILIZATION limit)`,
	}},
	{"utilization.bad.yaml", []string{
		`services[0].backends[0].max_utilization: must be in (0, 1], got 1.5`,
		`services[0].backends[1]: balancing_mode UTILIZATION requires max_utilization`,
		`services[0].backends[1]: balancing_mode UTILIZATION requires utilization_rate_per_instance`,
		`services[0].backends[2].utilization_rate_per_instance: must be a finite number > 0, got -3`,
		`services[1].backends[0].utilization_rate_per_instance: not valid with balancing_mode RATE (it is a UTILIZATION limit)`,
	}},
	{"capacity_scaler.bad.yaml", []string{
		`services[0].backends[0].capacity_scaler: must be in [0, 1] (0 drains), got 1.5`,
		`services[0].backends[1].capacity_scaler: must be in [0, 1] (0 drains), got -0.1`,
	}},
	{"health_check.bad.yaml", []string{
		`services[0].health_check.path: must start with "/"`,
		`services[0].health_check.port: must be in 1..65535, or 0 for the instance's port, got 70000`,
		`services[0].health_check.timeout: must be less than interval (5s), got 5s`,
		`services[0].health_check.healthy_threshold: must be in 1..100, got 0`,
		`services[0].health_check.unhealthy_threshold: must be in 1..100, got -1`,
		`services[0].health_check.jitter: must be in [0, 1), got 1`,
	}},
	{"health_interval.bad.yaml", []string{
		`services[0].health_check.grpc_service: only valid with protocol grpc; protocol is tcp`,
		`services[0].health_check.interval: must be > 0, got -1s`,
		`services[0].health_check.timeout: must be > 0, got 0s`,
		`services[0].health_check.jitter: must be in [0, 1), got NaN`,
	}},
	{"addresses.bad.yaml", []string{
		`instances[0].address: invalid host:port "localhost": missing port in address`,
		`instances[1].address: invalid host:port "127.0.0.1:70000": port 70000 out of range 1..65535`,
		`instances[2].address: invalid host:port ":9000": missing host`,
		`instances[3].address: invalid host:port "bad host:80": host "bad host" is neither an IP address nor a DNS name`,
		`instances[4].address: invalid host:port "127.0.0.1:http": port "http" is not a number`,
		`instances[5].max_concurrency: must be in 0..1000000 (0 = unlimited), got -1`,
		`regions[0].zones[0].groups[0].instances[6].address: duplicate address "127.0.0.1:9001" (first at regions[0].zones[0].groups[0].instances[5])`,
		`regions[0].zones[0].groups[0].instances[7].address: required`,
	}},
	{"hash_scope.bad.yaml", []string{
		`services[0].hash_scope: only valid with a hash policy (hash2, hash3, hash5); policy is "waterfall"`,
		`services[1].hash_scope: must be one of global, nearest_region; got "nearest"`,
	}},
	{"affinity_cookie.bad.yaml", []string{
		`services[0].session_affinity.cookie_name: required for type http_cookie`,
		`services[1].session_affinity.cookie_name: invalid cookie name "my cookie": must be an RFC 6265 token`,
		`services[1].session_affinity.cookie_ttl: must be in [0, 9600h0m0s] (400 days; 0 = session cookie), got -1m0s`,
		`services[2].session_affinity.cookie_name: only valid with type generated_cookie or http_cookie; type is client_ip`,
		`services[2].session_affinity.cookie_ttl: only valid with type generated_cookie or http_cookie; type is client_ip`,
		`services[3].session_affinity.cookie_secret: required for type generated_cookie`,
		`services[4].session_affinity.cookie_secret: must be at least 32 bytes, got 9`,
		`services[4].session_affinity.previous_cookie_secret: must be at least 32 bytes, got 10`,
		`services[5].session_affinity.previous_cookie_secret: must differ from cookie_secret`,
		`services[6].session_affinity.cookie_secret: only valid with type generated_cookie; type is http_cookie`,
		`services[6].session_affinity.previous_cookie_secret: only valid with type generated_cookie; type is http_cookie`,
	}},
	{"affinity_header.bad.yaml", []string{
		`services[0].session_affinity.header_name: required for type header`,
		`services[1].session_affinity.header_name: invalid header name "X User": must be an HTTP token`,
		`services[2].session_affinity.header_name: only valid with type header; type is none`,
	}},
	{"no_routes.bad.yaml", []string{
		`routes: at least one route is required`,
	}},
	{"empty.bad.yaml", []string{
		`regions: at least one region is required`,
		`services: at least one service is required`,
		`routes: at least one route is required`,
	}},
	{"routes.bad.yaml", []string{
		`routes[0].path_prefix: must start with "/" and contain no spaces, control characters, '?' or '#', got "api"`,
		`routes[1].host: invalid host "foo*.com": a wildcard is only allowed as a leading "*." or as "*"`,
		`routes[2].host: invalid host "example.com:80": want a DNS name or IP address, without a port`,
		`routes[4]: duplicate route for host "example.com" and path_prefix "/" (first at routes[3])`,
		`routes[5].host: required (use "*" for any host)`,
		`routes[5].path_prefix: must start with "/" and contain no spaces, control characters, '?' or '#', got "/a b"`,
	}},
	{"spill.bad.yaml", []string{
		`services[0].spill.threshold: must be in [0, 1] (0 disables preemptive spill), got 1.5`,
		`services[0].spill.slope: must be in (0, 1000], got 0`,
	}},
	{"structure.bad.yaml", []string{
		`regions[0].name: invalid region name "US-East"`,
		`regions[0].zones: at least one zone is required`,
		`regions[1].name: required`,
		`regions[1].zones[0].groups: at least one instance group is required`,
		`regions[1].zones[1].groups[0].instances: at least one instance is required (or an autoscaling block)`,
		`services[0].backends: at least one backend is required`,
	}},
	{"three_problems.bad.yaml", []string{
		`services[0].health_chek: unknown field (did you mean "health_check"?)`,
		`services[0].backends[0].capacity_scaler: must be in [0, 1] (0 drains), got 2`,
		`routes[0].service: unknown service "webb"`,
	}},
	{"listeners.bad.yaml", []string{
		`listeners[0].name: invalid listener name "Public"`,
		`listeners[0].port: required, in 1..65535; got 0`,
		`listeners[0].service: only valid with protocol tcp; protocol https uses routes`,
		`listeners[0].certificates: at least one certificate is required for protocol https`,
		`listeners[1].certificates: only valid with protocol https; protocol is http`,
		`listeners[2].name: duplicate listener name "plain" (first at listeners[1])`,
		`listeners[2].port: duplicate port 8080 (first at listeners[1])`,
		`listeners[2].protocol: must be one of http, https, tcp; got "HTTP"`,
		`listeners[3].port: required, in 1..65535; got 70000`,
		`listeners[3].protocol: required: one of http, https, tcp`,
		`listeners[4].certificates[0].key_file: required`,
		`listeners[4].certificates[1].cert_file: required`,
		`listeners[5].service: required for protocol tcp`,
		`listeners[6].service: unknown service "dbb"`,
		`listeners[7].service: service "web" has balancing_mode RATE; a tcp listener needs a CONNECTION service`,
	}},
	{"listener_limits.bad.yaml", []string{
		`listeners[0].read_header_timeout: must be > 0, got 0s`,
		`listeners[0].idle_timeout: must be > 0, got -1s`,
		`listeners[0].max_header_bytes: must be in 1024..1048576, got 1023`,
		`listeners[0].max_request_body_bytes: must be in 0..1099511627776 (0 = unlimited), got -1`,
		`listeners[0].request_body_timeout: must be in 0..24h0m0s (0 = no limit), got -1s`,
		`listeners[0].max_connection_age: must be in 0..24h0m0s (0 = never), got -1s`,
		`listeners[1].certificates: only valid with protocol https; protocol is tcp`,
		`listeners[1].idle_timeout: must be > 0, got -5s`,
		`listeners[1].read_header_timeout: only valid with protocol http or https; protocol is tcp`,
		`listeners[1].max_header_bytes: only valid with protocol http or https; protocol is tcp`,
		`listeners[1].max_request_body_bytes: only valid with protocol http or https; protocol is tcp`,
		`listeners[1].request_body_timeout: only valid with protocol http or https; protocol is tcp`,
		`listeners[1].max_connection_age: only valid with protocol http or https; protocol is tcp`,
		`listeners[1].fast_path: only valid with protocol http or https; protocol is tcp`,
		`listeners[2].max_header_bytes: expected an integer, got string "lots"`,
		`listeners[2].max_request_body_bytes: expected an integer, got number 1.5`,
	}},
	{"outlier_detection.bad.yaml", []string{
		`services[0].outlier_detection.consecutive_5xx: must be in 0..10000 (0 disables), got -1`,
		`services[0].outlier_detection.consecutive_connect_failures: must be in 0..10000 (0 disables), got -2`,
		`services[0].outlier_detection.max_ejection_time: must be >= base_ejection_time (1m0s), got 30s`,
		`services[0].outlier_detection.max_ejection_percent: must be in 0..100, got 101`,
		`services[1].outlier_detection.base_ejection_time: must be > 0, got 0s`,
		`services[1].outlier_detection.max_ejection_percent: must be in 0..100, got -1`,
	}},
	{"envoy_priority.bad.yaml", []string{
		`services[0].hash_scope: only valid with a hash policy (hash2, hash3, hash5); policy is "envoy_priority"`,
		`services[0].load_aware.enabled: only valid with a planned policy (waterfall, min_rtt), not envoy_priority`,
		`services[0].overload.shed: only valid with a planned policy (waterfall, min_rtt), not envoy_priority`,
	}},
	{"load_aware.bad.yaml", []string{
		`services[0].load_aware.slow_start: must be >= 0 (0 disables slow start), got -1s`,
		`services[0].load_aware.decay: must be > 0, got 0s`,
		`services[0].load_aware.probe_after: must be at most 1h0m0s, got 2h0m0s`,
		`services[0].load_aware.utilization_weight: must be in [0, 100] (0 ignores load reports), got -1`,
		`services[0].overload.retry_after: must be at least 1s (Retry-After counts whole seconds), got 100ms`,
		`services[0].overload.admit: must be in (0, 1], got 1.5`,
		`services[0].overload.max_shed: must be in (0, 1], got 0`,
		`services[1].load_aware.enabled: only valid with a planned policy (waterfall, min_rtt), not round_robin`,
		`services[1].overload.shed: only valid with a planned policy (waterfall, min_rtt), not round_robin`,
	}},
	{"route_timeout.bad.yaml", []string{
		`routes[0].timeout: must be > 0, got 0s`,
		`routes[0].retries: must be in 0..5 (0 = never retry), got 6`,
		`routes[1].timeout: must be > 0, got -1s`,
		`routes[1].retries: must be in 0..5 (0 = never retry), got -1`,
		`routes[2].timeout: expected a duration such as "5s", got number 30`,
		`routes[3].per_try_timeout: must be in 0..timeout (1s; 0 = off), got 2s`,
	}},
	{"syntax.bad.yaml", []string{
		`parsing yaml: yaml: line 9: did not find expected '-' indicator`,
	}},
	{"duplicate_key.bad.yaml", []string{
		`parsing yaml: yaml: unmarshal errors: line 12: mapping key "policy" already defined at line 11`,
	}},
	{"quota.bad.yaml", []string{
		`quota.metrics[0].unit: must be "requests" or "bytes", got "calls"`,
		`quota.metrics[0].default_limit: must be in 0..1000000000000 per minute, got -1`,
		`quota.metrics[1].name: duplicate quota metric name "reads" (first at quota.metrics[0])`,
		`quota.charges[0].service: unknown service "api"`,
		`quota.charges[0].method: must be an upper-case HTTP method such as "GET", got "get"`,
		`quota.charges[0].path_prefix: must start with "/"`,
		`quota.charges[0].metric: unknown quota metric "writes"`,
		`quota.charges[0].cost: must be in 1..1000000, got 0`,
		`quota.consumers[0].api_key: must be 8 to 256 printable ASCII bytes without spaces (got 5 bytes)`,
		`quota.consumers[1].project: invalid project name "Acme"`,
		`quota.consumers[2].api_key: duplicate API key (first at quota.consumers[1])`,
		`quota.consumers[2].project: "anonymous" is reserved for requests without a key (allow_anonymous)`,
		`quota.producer_overrides[0].project: unknown project "nobody": no consumer maps to it`,
		`quota.producer_overrides[0].limit: must be in 0..1000000000000 per minute, got 10000000000000`,
		`quota.consumer_overrides[1]: duplicate override of project "anonymous", metric "reads" (first at quota.consumer_overrides[0])`,
	}},
	{"autoscaling.bad.yaml", []string{
		`regions[0].zones[0].groups[0].autoscaling.min_instances: must be in 0..max_instances (3), got 5`,
		`regions[0].zones[0].groups[0].autoscaling.cpu_target: must be in [0.1, 0.95], got 0.99`,
		`regions[0].zones[0].groups[0].autoscaling.cold_start: must be > 0, got 0s`,
		`regions[0].zones[0].groups[0].autoscaling.concurrency_long_window: must be at least concurrency_window (2m0s), got 1m0s`,
		`regions[0].zones[0].groups[1].autoscaling.max_instances: required (1..10000) when the autoscaling block is set, got 0`,
		`regions[0].zones[0].groups[2].autoscaling.idle_timout: unknown field (did you mean "idle_timeout"?)`,
		`regions[0].zones[0].groups[2].autoscaling.max_concurrency_per_instance: must be in 1..1000000, got 0`,
		`regions[0].zones[0].groups[2].autoscaling.act_low_cpu: must be in (0, 0.9), got 0.95`,
		`regions[0].zones[0].groups[2].autoscaling.tolerance: must be in [0, 0.5], got NaN`,
	}},
	{"empty_group.bad.yaml", []string{
		`regions[0].zones[0].groups[0].instances: at least one instance is required (or an autoscaling block)`,
		`regions[0].zones[0].groups[1].instances: at least one instance is required (or an autoscaling block)`,
		`regions[0].zones[0].groups[1].autoscaling.max_instances: required (1..10000) when the autoscaling block is set, got 0`,
		`regions[0].zones[0].groups[2].instances: at least one instance is required (or an autoscaling block)`,
		`regions[0].zones[0].groups[3].instances[0].demoted: expected true or false`,
	}},
	{"not_a_map.bad.yaml", []string{
		`parsing yaml: yaml: unmarshal errors: line 1: cannot unmarshal !!seq into map[string]interface {}`,
	}},
}

func TestLoadBadFiles(t *testing.T) {
	for _, tt := range badFiles {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			c, err := load(path, nil)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, want error", path, c)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Load(%s) error does not match ErrInvalid: %v", path, err)
			}
			var got []string
			for _, fe := range FieldErrors(err) {
				got = append(got, fe.Error())
			}
			// One error per line: the joined message must list them all.
			if n := strings.Count(err.Error(), "\n") + 1; n != len(got) {
				t.Errorf("Load(%s): error has %d lines, %d FieldErrors:\n%v", path, n, len(got), err)
			}
			unmatched := slices.Clone(got)
			for _, w := range tt.wantErrs {
				i := slices.IndexFunc(unmatched, func(g string) bool {
					return strings.HasPrefix(g, path+": ") && strings.Contains(g, w)
				})
				if i < 0 {
					t.Errorf("Load(%s): no error %q in:\n%s", path, path+": …"+w, strings.Join(got, "\n"))
					continue
				}
				unmatched = slices.Delete(unmatched, i, i+1)
			}
			if len(unmatched) > 0 {
				t.Errorf("Load(%s): unexpected errors:\n%s", path, strings.Join(unmatched, "\n"))
			}
		})
	}
}

// TestBadFilesCovered keeps the table and the fixture folder in step.
func TestBadFilesCovered(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var onDisk, inTable []string
	for _, f := range files {
		onDisk = append(onDisk, filepath.Base(f))
	}
	for _, tt := range badFiles {
		inTable = append(inTable, tt.file)
	}
	slices.Sort(inTable)
	if diff := cmp.Diff(onDisk, inTable); diff != "" {
		t.Errorf("testdata/*.bad.yaml vs badFiles table (-disk +table):\n%s", diff)
	}
	if len(onDisk) < 15 {
		t.Errorf("%d bad fixtures, want at least 15", len(onDisk))
	}
}

func TestThreeProblemsReportedTogether(t *testing.T) {
	_, err := Load("testdata/three_problems.bad.yaml")
	got := FieldErrors(err)
	if len(got) != 3 {
		t.Fatalf("Load(three_problems) reported %d problems, want 3:\n%v", len(got), err)
	}
	want := []string{"services[0].health_chek", "services[0].backends[0].capacity_scaler", "routes[0].service"}
	var paths []string
	for _, fe := range got {
		if fe.File != "testdata/three_problems.bad.yaml" {
			t.Errorf("FieldError.File = %q, want the file name", fe.File)
		}
		paths = append(paths, fe.Path)
	}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("problem paths (-want +got):\n%s", diff)
	}
}

func TestLoadGoodFiles(t *testing.T) {
	hc := DefaultHealthCheck()
	tests := []struct {
		file string
		want Config
	}{
		{
			file: "minimal.good.yaml",
			want: Config{
				Regions: []Region{{Name: "r1", Zones: []Zone{{Name: "z1", Groups: []Group{{
					Name: "g1", Instances: []Instance{{Address: "127.0.0.1:9001"}},
				}}}}}},
				Services: []Service{{
					Name:            "web",
					Policy:          PolicyWaterfall,
					BalancingMode:   ModeRate,
					Backends:        []Backend{{Group: "g1", MaxRatePerInstance: 10, CapacityScaler: 1}},
					SessionAffinity: SessionAffinity{Type: AffinityNone},
					HealthCheck:     hc,
					Spill:           Spill{Threshold: 0.5, Slope: 2},
					OutlierDetection: OutlierDetection{
						Consecutive5xx: 5, ConsecutiveConnectFailures: 3,
						BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second,
						MaxEjectionPercent: 50,
					},
					TargetUtilization:  0.95,
					Feedback:           DefaultFeedback(),
					MaxPendingRequests: DefaultMaxPendingRequests,
					LoadAware:          DefaultLoadAware(), Overload: DefaultOverload(), Prequal: DefaultPrequal(),
				}},
				Routes: []Route{{Host: "*", PathPrefix: "/", Service: "web", Timeout: 30 * time.Second, Retries: 1}},
			},
		},
		{
			file: "full.good.yaml",
			want: Config{
				Regions: []Region{
					{Name: "us-east", Zones: []Zone{
						{Name: "us-east-b", Groups: []Group{{Name: "us-east-b-web", Instances: []Instance{
							{Address: "127.0.0.1:9101", MaxConcurrency: 80},
							{Address: "[::1]:9102"},
						}}}},
						{Name: "us-east-c", Groups: []Group{{Name: "us-east-c-web", Instances: []Instance{
							{Address: "backend-1.internal.example:8443"},
						}}}},
					}},
					{Name: "eu-west", Zones: []Zone{
						{Name: "eu-west-b", Groups: []Group{{Name: "eu-west-b-web", Instances: []Instance{
							{Address: "10.0.0.7:80"},
						}}}},
					}},
				},
				Services: []Service{
					{
						Name:          "web",
						Policy:        PolicyHash5,
						HashScope:     HashScopeNearestRegion,
						BalancingMode: ModeConnection,
						Backends: []Backend{
							{Group: "us-east-b-web", MaxConnectionsPerInstance: 50, CapacityScaler: 0.5},
							{Group: "us-east-c-web", MaxConnections: 200, CapacityScaler: 1},
							{Group: "eu-west-b-web", MaxConnections: 100, CapacityScaler: 0},
						},
						SessionAffinity: SessionAffinity{Type: AffinityGeneratedCookie, CookieName: "SPILLWAY_AFFINITY", CookieTTL: 90 * time.Minute,
							CookieSecret: "full-good-example-secret-0123456789abcdef", PreviousCookieSecret: "full-good-previous-secret-0123456789abcdef"},
						HealthCheck: HealthCheck{
							Protocol: HealthHTTPS, Path: "/ready", Port: 8080,
							Interval: 10 * time.Second, Timeout: 2 * time.Second,
							HealthyThreshold: 1, UnhealthyThreshold: 5, Jitter: 0,
						},
						Spill:              Spill{Threshold: 0.25, Slope: 4},
						OutlierDetection:   DefaultOutlierDetection(),
						TargetUtilization:  0.95,
						Feedback:           DefaultFeedback(),
						MaxPendingRequests: DefaultMaxPendingRequests,
						LoadAware:          DefaultLoadAware(), Overload: DefaultOverload(), Prequal: DefaultPrequal(),
					},
					{
						Name:            "api",
						Policy:          PolicyLeastRequest,
						BalancingMode:   ModeUtilization,
						Backends:        []Backend{{Group: "eu-west-b-web", MaxUtilization: 0.8, UtilizationRatePerInstance: 250, CapacityScaler: 1}},
						SessionAffinity: SessionAffinity{Type: AffinityHeader, HeaderName: "X-User"},
						HealthCheck: HealthCheck{
							Protocol: HealthGRPC, Path: "/healthz", GRPCService: "api.v1.Api",
							Interval: hc.Interval, Timeout: hc.Timeout,
							HealthyThreshold: hc.HealthyThreshold, UnhealthyThreshold: hc.UnhealthyThreshold, Jitter: hc.Jitter,
						},
						Spill:              DefaultSpill(),
						OutlierDetection:   DefaultOutlierDetection(),
						TargetUtilization:  0.95,
						Feedback:           DefaultFeedback(),
						MaxPendingRequests: DefaultMaxPendingRequests,
						LoadAware:          DefaultLoadAware(), Overload: DefaultOverload(), Prequal: DefaultPrequal(),
					},
				},
				Routes: []Route{
					{Host: "api.example.com", PathPrefix: "/v1/", Service: "api", Timeout: 30 * time.Second, Retries: 1},
					{Host: "*.example.com", PathPrefix: "/", Service: "web", Timeout: 30 * time.Second, Retries: 1},
					{Host: "*", PathPrefix: "/", Service: "web", Timeout: 30 * time.Second, Retries: 1},
				},
			},
		},
		{
			file: "listeners.good.yaml",
			want: Config{
				Regions: []Region{{Name: "r1", Zones: []Zone{{Name: "z1", Groups: []Group{{
					Name: "g1", Instances: []Instance{{Address: "127.0.0.1:9001"}},
				}}}}}},
				Services: []Service{
					{
						Name:            "web",
						Policy:          PolicyWaterfall,
						BalancingMode:   ModeRate,
						Backends:        []Backend{{Group: "g1", MaxRatePerInstance: 10, CapacityScaler: 1}},
						SessionAffinity: SessionAffinity{Type: AffinityNone},
						HealthCheck:     hc,
						Spill:           DefaultSpill(),
						OutlierDetection: OutlierDetection{
							Consecutive5xx: 0, ConsecutiveConnectFailures: 3,
							BaseEjectionTime: 10 * time.Second, MaxEjectionTime: 10 * time.Second,
							MaxEjectionPercent: 100,
						},
						TargetUtilization:  0.95,
						Feedback:           DefaultFeedback(),
						MaxPendingRequests: DefaultMaxPendingRequests,
						LoadAware:          DefaultLoadAware(), Overload: DefaultOverload(), Prequal: DefaultPrequal(),
					},
					{
						Name:               "db",
						Policy:             PolicyHash5,
						HashScope:          HashScopeGlobal,
						BalancingMode:      ModeConnection,
						Backends:           []Backend{{Group: "g1", MaxConnectionsPerInstance: 100, CapacityScaler: 1}},
						SessionAffinity:    SessionAffinity{Type: AffinityNone},
						HealthCheck:        hc,
						Spill:              DefaultSpill(),
						OutlierDetection:   DefaultOutlierDetection(),
						TargetUtilization:  0.95,
						Feedback:           DefaultFeedback(),
						MaxPendingRequests: DefaultMaxPendingRequests,
						LoadAware:          DefaultLoadAware(), Overload: DefaultOverload(), Prequal: DefaultPrequal(),
					},
				},
				Routes: []Route{
					{Host: "*", PathPrefix: "/", Service: "web", Timeout: 2 * time.Minute, Retries: 0},
					{Host: "api.example.com", PathPrefix: "/", Service: "web", Timeout: 30 * time.Second, Retries: 1},
				},
				Listeners: []Listener{
					{
						Name: "plain", Protocol: ListenerHTTP, Port: 8080,
						ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 65536,
						RequestBodyTimeout: 10 * time.Second, MaxConnectionsPerClient: 256, FastPath: true,
					},
					{
						Name: "public", Protocol: ListenerHTTPS, Port: 8443,
						Certificates: []Certificate{
							{CertFile: "/etc/spillway/tls/default.crt", KeyFile: "/etc/spillway/tls/default.key"},
							{CertFile: "certs/api.crt", KeyFile: "certs/api.key"},
						},
						ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute,
						MaxHeaderBytes: 1024, MaxRequestBodyBytes: 10 << 20, RequestBodyTimeout: 30 * time.Second,
						MaxConnectionsPerClient: 256,
					},
					{Name: "db-l4", Protocol: ListenerTCP, Port: 5432, Service: "db", IdleTimeout: 10 * time.Minute, FirstByteTimeout: 30 * time.Second, MaxConnections: 10000, MaxConnectionsPerClient: 256},
					{Name: "db-l4-idle", Protocol: ListenerTCP, Port: 5433, Service: "db", IdleTimeout: time.Hour, FirstByteTimeout: 30 * time.Second, MaxConnections: 10000, MaxConnectionsPerClient: 256},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			got, err := load(path, nil)
			if err != nil {
				t.Fatalf("Load(%s): %v", path, err)
			}
			if diff := cmp.Diff(tt.want, *got, ignoreIndex); diff != "" {
				t.Errorf("Load(%s) mismatch (-want +got):\n%s", path, diff)
			}
			if got.Source() != path {
				t.Errorf("Source() = %q, want %q", got.Source(), path)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate() on a loaded config: %v", err)
			}
		})
	}
}

func TestHashScopeDefault(t *testing.T) {
	// minimal.good.yaml with the policy switched: hash policies get
	// "global", others keep "".
	data, err := os.ReadFile("testdata/minimal.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Policies() {
		t.Run(string(p), func(t *testing.T) {
			src := strings.Replace(string(data), "  - name: web\n", "  - name: web\n    policy: "+string(p)+"\n", 1)
			c, err := Parse([]byte(src), "policy.yaml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := HashScope("")
			if p.IsHash() {
				want = HashScopeGlobal
			}
			if got := c.Services[0].HashScope; c.Services[0].Policy != p || got != want {
				t.Errorf("policy %s: HashScope = %q, want %q", c.Services[0].Policy, got, want)
			}
		})
	}
}

func TestPolicyKinds(t *testing.T) {
	tests := []struct {
		policy      Policy
		wantPlanned bool
		wantHash    bool
	}{
		{PolicyWaterfall, true, false},
		{PolicyMinRTT, true, false},
		{PolicyRoundRobin, false, false},
		{PolicyLeastRequest, false, false},
		{PolicyEnvoyPriority, false, false},
		{PolicyHash2, false, true},
		{PolicyHash3, false, true},
		{PolicyHash5, false, true},
		{PolicyPrequal, false, false},
	}
	if len(tests) != len(Policies()) {
		t.Fatalf("%d cases for %d policies", len(tests), len(Policies()))
	}
	for _, tt := range tests {
		if got, want := tt.policy.OrdersRegions(), tt.wantPlanned || tt.policy == PolicyEnvoyPriority; got != want {
			t.Errorf("%s.OrdersRegions() = %v, want %v", tt.policy, got, want)
		}
		if got := tt.policy.IsPlanned(); got != tt.wantPlanned {
			t.Errorf("%s.IsPlanned() = %v, want %v", tt.policy, got, tt.wantPlanned)
		}
		if got := tt.policy.IsHash(); got != tt.wantHash {
			t.Errorf("%s.IsHash() = %v, want %v", tt.policy, got, tt.wantHash)
		}
	}
}

// TestLoadExampleConfigs loads every configs/*.yaml shipped with the product.
func TestLoadExampleConfigs(t *testing.T) {
	files, err := filepath.Glob("../configs/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d configs/*.yaml, want the demo and one per policy family", len(files))
	}
	policies := map[Policy]bool{}
	affinities := map[AffinityType]bool{}
	for _, f := range files {
		c, err := load(f, nil)
		if err != nil {
			t.Errorf("Load(%s): %v", f, err)
			continue
		}
		for _, s := range c.Services {
			policies[s.Policy] = true
			affinities[s.SessionAffinity.Type] = true
		}
	}
	for _, p := range Policies() {
		if !policies[p] {
			t.Errorf("no example config uses policy %s", p)
		}
	}
	for _, a := range []AffinityType{AffinityClientIP, AffinityClientIPProto, AffinityClientIPPortProto, AffinityGeneratedCookie, AffinityHTTPCookie, AffinityHeader} {
		if !affinities[a] {
			t.Errorf("no example config uses session affinity %s", a)
		}
	}
}

func TestDemoTopology(t *testing.T) {
	c, err := load("../configs/demo.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	var regions []string
	for _, r := range c.Regions {
		regions = append(regions, r.Name)
		if len(r.Zones) != 2 {
			t.Errorf("region %s has %d zones, want 2", r.Name, len(r.Zones))
		}
		for _, z := range r.Zones {
			if len(z.Groups) != 1 {
				t.Errorf("zone %s has %d groups, want 1", z.Name, len(z.Groups))
			}
		}
	}
	if diff := cmp.Diff([]string{"us-east", "eu-west", "asia-east"}, regions); diff != "" {
		t.Errorf("demo regions (-want +got):\n%s", diff)
	}
	s, ok := c.Service("web")
	if !ok || s.Policy != PolicyWaterfall || len(s.Backends) != 6 {
		t.Fatalf("demo service web = %+v, %v; want waterfall over 6 groups", s, ok)
	}
	if r, ok := c.Route("demo.local", "/anything"); !ok || r.Service != "web" {
		t.Errorf("demo Route = %v, %v; want service web", r, ok)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	if errors.Is(err, ErrInvalid) {
		t.Errorf("Load(missing) matches ErrInvalid; an I/O error must not")
	}
	if err == nil || !strings.Contains(err.Error(), "testdata/does-not-exist.yaml") {
		t.Errorf("Load(missing) error %v does not name the file", err)
	}
}

func TestCaseInsensitiveKeys(t *testing.T) {
	// viper lower-cases keys, inside lists too.
	src := `
Regions:
  - Name: r1
    ZONES:
      - name: z1
        groups: [{name: g1, instances: [{Address: "127.0.0.1:1"}]}]
services:
  - name: web
    Policy: round_robin
    backends: [{group: g1, MAX_RATE: 5}]
routes: [{Service: web}]
`
	c, err := Parse([]byte(src), "case.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Services[0].Policy != PolicyRoundRobin || c.Services[0].Backends[0].MaxRate != 5 ||
		c.Regions[0].Zones[0].Groups[0].Instances[0].Address != "127.0.0.1:1" {
		t.Errorf("mixed-case keys decoded to %+v", c)
	}
}

func TestNullValuesAreAbsent(t *testing.T) {
	src := `
regions: [{name: r1, zones: [{name: z1, groups: [{name: g1, instances: [{address: "127.0.0.1:1"}]}]}]}]
services:
  - name: web
    policy:
    health_check:
    backends: [{group: g1, max_rate: 5, capacity_scaler: ~}]
routes: [{service: web, host: null}]
`
	c, err := Parse([]byte(src), "null.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	s := c.Services[0]
	if s.Policy != PolicyWaterfall || s.HealthCheck != DefaultHealthCheck() || s.Backends[0].CapacityScaler != 1 || c.Routes[0].Host != "*" {
		t.Errorf("null values did not take defaults: %+v, route %+v", s, c.Routes[0])
	}
}

func TestEmptyMapIsTypeChecked(t *testing.T) {
	// viper drops empty maps from AllKeys; the loader must still see them.
	_, err := Parse([]byte("services: {}\n"), "m.yaml")
	if err == nil || !strings.Contains(err.Error(), "m.yaml: services: expected a list, got a map") {
		t.Errorf("Parse(services: {}) = %v, want a type error on services", err)
	}
}

func TestNew(t *testing.T) {
	svc := DefaultService()
	svc.Name = "web"
	svc.Policy = PolicyHash3
	svc.Backends = []Backend{{Group: "g1", MaxRate: 10, CapacityScaler: 1}}
	in := Config{
		Regions:  []Region{{Name: "r1", Zones: []Zone{{Name: "z1", Groups: []Group{{Name: "g1", Instances: []Instance{{Address: "127.0.0.1:1"}}}}}}}},
		Services: []Service{svc},
		Routes:   []Route{DefaultRoute()},
	}
	in.Routes[0].Service = "web"
	c, err := New(in)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if c.Services[0].HashScope != HashScopeGlobal {
		t.Errorf("New: HashScope = %q, want global", c.Services[0].HashScope)
	}
	// The result is a deep copy: changing the input does not reach it.
	in.Services[0].Backends[0].MaxRate = 99
	in.Regions[0].Zones[0].Groups[0].Name = "changed"
	if got := c.Services[0].Backends[0].MaxRate; got != 10 {
		t.Errorf("New result shares backends with its input: MaxRate = %v", got)
	}
	if _, ok := c.Group("g1"); !ok {
		t.Errorf("New result shares groups with its input")
	}
	if in.Services[0].HashScope != "" {
		t.Errorf("New changed its input's HashScope to %q", in.Services[0].HashScope)
	}

	in.Regions[0].Zones[0].Groups[0].Name = "g1"
	bad := in
	bad.Routes = []Route{DefaultRoute()}
	bad.Routes[0].Service = "nope"
	_, err = New(bad)
	if err == nil || err.Error() != `routes[0].service: unknown service "nope"` {
		t.Errorf("New(bad) = %v, want the path without a file name", err)
	}
}

func TestDottedTopLevelKeys(t *testing.T) {
	// viper splits top-level keys on dots; one hidden under a list must
	// still be reported.
	src := mustRead(t, "testdata/minimal.good.yaml") + "services.polcy: x\nregions.0.name: y\nfoo.bar: 1\n"
	_, err := Parse([]byte(src), "dots.yaml")
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Error())
	}
	want := []string{
		"dots.yaml: regions.0.name: unknown field",
		"dots.yaml: services.polcy: unknown field",
		"dots.yaml: foo: unknown field",
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse errors (-want +got):\n%s", diff)
	}
}

func TestListenerLookup(t *testing.T) {
	c, err := load("testdata/listeners.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		wantOK   bool
		wantPort int
	}{
		{"plain", true, 8080},
		{"public", true, 8443},
		{"db-l4", true, 5432},
		{"db-l4-idle", true, 5433},
		{"missing", false, 0},
		{"", false, 0},
	}
	for _, tt := range tests {
		l, ok := c.Listener(tt.name)
		if ok != tt.wantOK {
			t.Errorf("Listener(%q) ok = %v, want %v", tt.name, ok, tt.wantOK)
			continue
		}
		if ok && (l.Port != tt.wantPort || l.Name != tt.name) {
			t.Errorf("Listener(%q) = %s:%d, want port %d", tt.name, l.Name, l.Port, tt.wantPort)
		}
		if ok && l != &c.Listeners[slices.IndexFunc(c.Listeners, func(x Listener) bool { return x.Name == tt.name })] {
			t.Errorf("Listener(%q) does not point into the Config", tt.name)
		}
	}
	// A Config built by hand answers too, from a throwaway index.
	hand := Config{Listeners: []Listener{{Name: "x", Port: 1}}}
	if l, ok := hand.Listener("x"); !ok || l.Port != 1 {
		t.Errorf("hand-built Listener(x) = %v, %v", l, ok)
	}
}

func TestDefaultListener(t *testing.T) {
	tests := []struct {
		protocol ListenerProtocol
		want     Listener
	}{
		{ListenerHTTP, Listener{Protocol: "http", ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 65536, RequestBodyTimeout: 10 * time.Second, MaxConnectionsPerClient: 256, FastPath: true}},
		{ListenerHTTPS, Listener{Protocol: "https", ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 65536, RequestBodyTimeout: 10 * time.Second, MaxConnectionsPerClient: 256, FastPath: true}},
		{ListenerTCP, Listener{Protocol: "tcp", IdleTimeout: 10 * time.Minute, FirstByteTimeout: 30 * time.Second, MaxConnections: 10000, MaxConnectionsPerClient: 256}},
	}
	if len(tests) != len(ListenerProtocols()) {
		t.Fatalf("%d cases for %d protocols", len(tests), len(ListenerProtocols()))
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, DefaultListener(tt.protocol)); diff != "" {
			t.Errorf("DefaultListener(%s) (-want +got):\n%s", tt.protocol, diff)
		}
	}
}

func TestNewWithListeners(t *testing.T) {
	svc := DefaultService()
	svc.Name, svc.BalancingMode = "db", ModeConnection
	svc.Backends = []Backend{{Group: "g1", MaxConnections: 10, CapacityScaler: 1}}
	route := DefaultRoute()
	route.Service = "db"
	https := DefaultListener(ListenerHTTPS)
	https.Name, https.Port = "tls", 443
	https.Certificates = []Certificate{{CertFile: "does/not/exist.crt", KeyFile: "does/not/exist.key"}}
	tcp := DefaultListener(ListenerTCP)
	tcp.Name, tcp.Port, tcp.Service = "l4", 5432, "db"
	in := Config{
		Regions:   []Region{{Name: "r1", Zones: []Zone{{Name: "z1", Groups: []Group{{Name: "g1", Instances: []Instance{{Address: "127.0.0.1:1"}}}}}}}},
		Services:  []Service{svc},
		Routes:    []Route{route},
		Listeners: []Listener{https, tcp},
	}
	c, err := New(in)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	in.Listeners[0].Certificates[0].CertFile = "changed"
	if l, _ := c.Listener("tls"); l.Certificates[0].CertFile != "does/not/exist.crt" {
		t.Errorf("New result shares certificates with its input: %q", l.Certificates[0].CertFile)
	}
	// Zero values are not defaults: a hand-built listener without them fails.
	in.Listeners = []Listener{{Name: "bare", Protocol: ListenerHTTP, Port: 80}}
	_, err = New(in)
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Error())
	}
	want := []string{
		"listeners[0].read_header_timeout: must be > 0, got 0s",
		"listeners[0].idle_timeout: must be > 0, got 0s",
		"listeners[0].max_header_bytes: must be in 1024..1048576, got 0",
		"listeners[0].max_connections_per_client: must be in 1..1000000, got 0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("New(bare listener) errors (-want +got):\n%s", diff)
	}
}

// TestBenchTemplate parses bench/gfe.yaml.tmpl as bench/proxy.sh renders
// it for each of its gfe targets, so that the benchmark never runs a
// config the gfe refuses: load_aware off (gfe, gfe-fast) and on (gfe-la).
func TestBenchTemplate(t *testing.T) {
	tmpl, err := os.ReadFile("../bench/gfe.yaml.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	for _, la := range []bool{false, true} {
		data := strings.NewReplacer("@ORIGIN@", "127.0.0.1:8080", "@LOAD_AWARE@", strconv.FormatBool(la)).Replace(string(tmpl))
		c, err := Parse([]byte(data), "gfe.yaml.tmpl")
		if err != nil {
			t.Fatalf("load_aware %v: %v", la, err)
		}
		if len(c.Services) != 1 || c.Services[0].LoadAware.Enabled != la {
			t.Errorf("load_aware %v: services %+v, want one with load_aware.enabled %v", la, c.Services, la)
		}
	}
}
