package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/internal/topology"
)

// upgradeNet is the 127.N.0.0/16 of TestUpgradeSkew's deployments (one at
// a time).
const upgradeNet = 87

// followWithin is how fast every gfe, of any release, must follow a health
// change: the checks see it in about 1 s (500 ms interval, 2 failures).
const followWithin = 5 * time.Second

// TestUpgradeSkew is the compatibility promise of docs/DEPLOY.md tested with
// real binaries: the releases in e2e/testdata/previous-releases.txt are
// built from their commits (testkit.BuildRelease: a git worktree, binaries
// cached per commit), and with mutual TLS and a gossip key, through a
// config with listeners, feedback, autoscaling and quota blocks,
//
//   - this tree's control plane serves a gfe of every previous release and
//     one of this tree together: each ACKs, serves (through the listener
//     and a quota-charged path too), follows a health change both ways
//     within followWithin, and is named on /status with its release; a
//     restarted old gfe becomes ready; a setting an old gfe cannot read
//     makes it refuse, and the control plane names it as lagging with the
//     error until the setting goes;
//   - each previous release's control plane serves this tree's gfe (a
//     rollback of the control planes), with the same checks.
func TestUpgradeSkew(t *testing.T) {
	start := time.Now()
	releases, err := testkit.PreviousReleases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]map[string]string{}
	for _, r := range releases {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.BuildTimeout)
		b, err := testkit.BuildRelease(ctx, r.Commit, "gfe", "controlplane")
		cancel()
		if err != nil {
			t.Fatalf("release %s: %v", r.Name, err)
		}
		old[r.Commit] = b
	}
	t.Logf("built or found %d releases in %v", len(releases), time.Since(start).Round(time.Millisecond))

	t.Run("new control plane, gfes of every release", func(t *testing.T) {
		// gfe-nyc-1.. run the previous releases in file order, the last
		// one this tree.
		binOf := map[string]string{}
		for i, r := range releases {
			binOf[fmt.Sprintf("gfe-nyc-%d", i+1)] = old[r.Commit]["gfe"]
		}
		c := startSkew(t, len(releases)+1, binOf)
		newest := c.GFEs[len(releases)]
		cp := c.Spec.ControlPlaneAdmin(0)
		checkSkew(t, c, cp)

		// The operator's view: which gfe runs which release, and none
		// refusing the snapshot.
		st := cpStatus(t, cp)
		for i, r := range releases {
			g := st.gfe(t, c.GFEs[i].Name)
			if !strings.Contains(g.BuildVersion, "rev "+r.Revision[:12]) || g.DeclaredFields != 0 || g.Lagging {
				t.Errorf("%s (release %s) on /status: build %q, declared fields %d, lagging %v; want rev %s, 0 (baseline), false",
					g.ID, r.Name, g.BuildVersion, g.DeclaredFields, g.Lagging, r.Revision[:12])
			}
		}
		if g := st.gfe(t, newest.Name); g.DeclaredFields == 0 || g.Lagging {
			t.Errorf("%s (this tree) on /status: declared fields %d, lagging %v; want its schema and false", g.ID, g.DeclaredFields, g.Lagging)
		}
		if len(st.LaggingGFEs) != 0 {
			t.Errorf("lagging_gfes = %v, want none", st.LaggingGFEs)
		}
		m := scrape(t, cp+"/metrics")
		for i, gf := range c.GFEs {
			schema := "schema=baseline"
			if i == len(releases) {
				schema = "schema=declared"
			}
			if v := m.value("spillway_controlplane_gfe_info", "gfe="+gf.Name, "build_version="+st.gfe(t, gf.Name).BuildVersion, schema); v != 1 {
				t.Errorf("spillway_controlplane_gfe_info{gfe=%s,%s} = %v, want 1", gf.Name, schema, v)
			}
		}

		// A restarted old gfe (a host reboot mid-rollout) becomes ready.
		for i, r := range releases {
			gf := c.GFEs[i]
			gf.Proc.Stop(5 * time.Second)
			t0 := time.Now()
			if err := c.StartGFE(gf); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := proc.WaitHTTP(ctx, gf.Admin+"/readyz")
			cancel()
			if err != nil {
				t.Fatalf("%s (release %s) restarted: not ready: %v", gf.Name, r.Name, err)
			}
			t.Logf("%s (release %s) restarted: ready after %v", gf.Name, r.Name, time.Since(t0).Round(time.Millisecond))
		}
		waitAcked(t, cp, c)

		// A setting an old gfe cannot read (within what the control
		// plane reads): that gfe refuses, and the control plane names it
		// as lagging, with the error, until the setting goes.
		base, err := os.ReadFile(c.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range releases {
			if r.Unreadable == "" {
				continue
			}
			key, value, _ := strings.Cut(r.Unreadable, "=")
			edited := strings.Replace(string(base), "{name: alt, ", "{name: alt, "+key+": "+value+", ", 1)
			if err := os.WriteFile(c.ConfigPath, []byte(edited), 0o644); err != nil {
				t.Fatal(err)
			}
			gf := c.GFEs[i]
			var g skewGFE
			err := topology.WaitFor(context.Background(), 20*time.Second, func() (bool, error) {
				st := cpStatus(t, cp)
				g = st.gfe(t, gf.Name)
				return slices.Equal(st.LaggingGFEs, []string{gf.Name}), fmt.Errorf("lagging_gfes %v", st.LaggingGFEs)
			})
			if err != nil {
				t.Fatalf("%s (release %s) with %s not named as lagging: %v", gf.Name, r.Name, r.Unreadable, err)
			}
			if !g.Lagging || g.NacksInARow == 0 || g.LastNack == nil || !strings.Contains(g.LastNack.Error, key) {
				t.Errorf("%s (release %s) refusing %s: %+v, want lagging with an error naming %s", gf.Name, r.Name, r.Unreadable, g, key)
			}
			m := scrape(t, cp+"/metrics")
			if v := m.value("spillway_controlplane_gfe_snapshot_nacks_in_a_row", "gfe="+gf.Name); v < 1 {
				t.Errorf("spillway_controlplane_gfe_snapshot_nacks_in_a_row{gfe=%s} = %v, want >= 1", gf.Name, v)
			}
			if v := m.value("spillway_controlplane_lagging_gfes"); v != 1 {
				t.Errorf("spillway_controlplane_lagging_gfes = %v, want 1", v)
			}
			t.Logf("%s (release %s) with %s: lagging, %d NACKs in a row: %s", gf.Name, r.Name, r.Unreadable, g.NacksInARow, g.LastNack.Error)
			if err := os.WriteFile(c.ConfigPath, base, 0o644); err != nil {
				t.Fatal(err)
			}
			waitAcked(t, cp, c)
		}
		checkNewPolicySkew(t, c, cp, base)
		t.Logf("new control plane with %d releases' gfes: %v", len(releases), time.Since(start).Round(time.Millisecond))
	})

	for _, r := range releases {
		t.Run("control plane of "+r.Name+", new gfe", func(t *testing.T) {
			c := startSkew(t, 1, map[string]string{"cp-1": old[r.Commit]["controlplane"]})
			cp := c.Spec.ControlPlaneAdmin(0)
			checkSkew(t, c, cp)
			if v := cpStatus(t, cp).Version; v.Revision != r.Revision {
				t.Errorf("control plane says it runs revision %q, want %s's", v.Revision, r.Name)
			}
			t.Logf("control plane of %s with a new gfe: %v", r.Name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// newPolicies are the policies no previous release knows, each with what a
// gfe of a previous release runs in its place (config's negotiated values):
// envoy_priority is left out (the default, waterfall, as before), prequal
// is sent as its nearest known policy, least_request.
var newPolicies = []struct {
	policy, oldRuns string
	// section is a service block that comes with the policy ("" none); a
	// previous release reads it as a field it does not know and drops it.
	section string
	dropped []string
}{
	{"envoy_priority", "waterfall", "", []string{"services[0].policy=envoy_priority"}},
	{"prequal", "least_request", "    prequal: {probe_rate: 20}\n", []string{"services[0].policy=prequal", "services[0].prequal"}},
}

// checkNewPolicySkew switches the service, in turn, to each policy no
// previous release knows (newPolicies) and checks that no gfe is stranded:
// every one ACKs and serves, none lags, each gfe of a previous release runs
// the policy negotiated in its place (on its /status) and the control plane
// names the values it left out of that gfe's snapshot; this tree's gfe gets
// it all and runs the new policy. A previous release keeps its snapshot
// version when what it is sent did not change (envoy_priority: the default
// it already ran) and gets a new one when it did (prequal: least_request).
// The config base comes back after each.
func checkNewPolicySkew(t *testing.T, c *topology.Cluster, cp string, base []byte) {
	t.Helper()
	newest := c.GFEs[len(c.GFEs)-1].Name
	for _, np := range newPolicies {
		edited := strings.Replace(string(base), "    policy: waterfall\n", "    policy: "+np.policy+"\n"+np.section, 1)
		if edited == string(base) {
			t.Fatal("config fixture changed: no policy: waterfall to replace")
		}
		before := map[string]string{}
		st := cpStatus(t, cp)
		for _, gf := range c.GFEs {
			before[gf.Name] = st.gfe(t, gf.Name).Acked
		}
		if err := os.WriteFile(c.ConfigPath, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		oldMoves := np.oldRuns != "waterfall"
		err := topology.WaitFor(context.Background(), 20*time.Second, func() (bool, error) {
			st := cpStatus(t, cp)
			if len(st.LaggingGFEs) != 0 {
				return false, fmt.Errorf("lagging_gfes %v", st.LaggingGFEs)
			}
			for _, gf := range c.GFEs {
				g := st.gfe(t, gf.Name)
				want, moved, runs := np.dropped, oldMoves, np.oldRuns
				if gf.Name == newest {
					want, moved, runs = nil, true, np.policy
				}
				if (g.Acked != before[gf.Name]) != moved || g.Acked != g.Pushed || !slices.Equal(g.Dropped, want) {
					return false, fmt.Errorf("%s: acked %q (before %q), pushed %q, dropped %q; want a new version %v, dropped %q", g.ID, g.Acked, before[gf.Name], g.Pushed, g.Dropped, moved, want)
				}
				gs, err := c.Status(context.Background(), gf)
				if err != nil {
					return false, err
				}
				if len(gs.Services) == 0 || gs.Services[0].Policy != runs {
					return false, fmt.Errorf("%s runs %v, want %s", gf.Name, servicePolicies(gs), runs)
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("service under %s: %v", np.policy, err)
		}
		for _, gf := range c.GFEs {
			for range 10 {
				if code, _ := skewRequest(t, gf.URL+"/", ""); code != http.StatusOK {
					t.Errorf("%s under %s: GET / = %d, want 200", gf.Name, np.policy, code)
				}
			}
		}
		t.Logf("%s: every gfe acks and serves; the previous releases' run %s, named on /status", np.policy, np.oldRuns)
		if err := os.WriteFile(c.ConfigPath, base, 0o644); err != nil {
			t.Fatal(err)
		}
		waitAcked(t, cp, c)
	}
}

// servicePolicies lists the policy of each service on a gfe's /status.
func servicePolicies(st *status.Status) []string {
	var out []string
	for _, s := range st.Services {
		out = append(out, s.Policy)
	}
	return out
}

// skewConfig is the deployment's config with a listener, a feedback block,
// an autoscaling block and a quota block, each set to other than its
// defaults, within what every release in the file reads.
func skewConfig(yaml string) string {
	yaml = strings.Replace(yaml, "          - name: us-east-b-web\n",
		"          - name: us-east-b-web\n            autoscaling: {min_instances: 2, max_instances: 4, max_concurrency_per_instance: 100}\n", 1)
	yaml = strings.Replace(yaml, "    balancing_mode: RATE\n", "    balancing_mode: RATE\n    feedback: {enabled: true, hold: 3s}\n", 1)
	return yaml + `listeners:
  - {name: alt, protocol: http, port: 8081, idle_timeout: 30s}
quota:
  metrics: [{name: calls, default_limit: 100000}]
  charges: [{service: web, path_prefix: /api/, metric: calls}]
  consumers:
    - {api_key: skew-key-0001, project: skew}
`
}

// startSkew starts one control plane and gfes gfes in site nyc over two
// instances, with the binaries of binOf in place of this tree's for the
// processes it names ("cp-1", "gfe-nyc-1", ...).
func startSkew(t *testing.T, gfes int, binOf map[string]string) *topology.Cluster {
	t.Helper()
	spec := topology.Spec{
		Net:        upgradeNet,
		Regions:    []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 2, Rate: 1000}},
		Sites:      []topology.Site{{Name: "nyc", GFEs: gfes, RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		EditConfig: skewConfig,
	}
	wrap := func(name, bin string, args []string) (string, []string) {
		if b, ok := binOf[name]; ok {
			return b, args
		}
		return bin, args
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := topology.Start(ctx, spec, topology.Options{Dir: t.TempDir(), Bins: bins, Wrap: wrap})
	if err != nil {
		t.Fatalf("topology.Start: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			dumpLogs(t, c)
		}
	})
	return c
}

// checkSkew checks a started skewed deployment: every gfe ACKs the control
// plane's snapshot, serves (its own listener, the configured one, a
// quota-charged path), and follows an instance going down and coming back
// within followWithin.
func checkSkew(t *testing.T, c *topology.Cluster, cp string) {
	t.Helper()
	waitAcked(t, cp, c)
	down, other := "us-east-b-1", "us-east-b-2"
	for _, gf := range c.GFEs {
		alt := strings.Replace(gf.URL, ":8080", ":8081", 1)
		by := map[string]int{}
		for range 20 {
			code, backend := skewRequest(t, gf.URL+"/", "")
			by[backend]++
			if code != http.StatusOK {
				t.Errorf("%s: GET / = %d, want 200", gf.Name, code)
			}
		}
		if by[down] == 0 || by[other] == 0 {
			t.Errorf("%s: 20 requests went to %v, want both instances", gf.Name, by)
		}
		if code, _ := skewRequest(t, alt+"/", ""); code != http.StatusOK {
			t.Errorf("%s: GET / on the configured listener = %d, want 200", gf.Name, code)
		}
		if code, _ := skewRequest(t, gf.URL+"/api/x", "skew-key-0001"); code != http.StatusOK {
			t.Errorf("%s: GET /api/x with a key = %d, want 200 (quota allocated by the control plane)", gf.Name, code)
		}
		if code, _ := skewRequest(t, gf.URL+"/api/x", ""); code != http.StatusUnauthorized {
			t.Errorf("%s: GET /api/x without a key = %d, want 401", gf.Name, code)
		}
	}

	ctx := context.Background()
	for _, healthy := range []bool{false, true} {
		t0 := time.Now()
		if err := topology.SetHealthy(ctx, healthy, c.Spec.Addr(0, 0, 1)); err != nil {
			t.Fatal(err)
		}
		for _, gf := range c.GFEs {
			took, ok := followed(t, gf.URL+"/", down, healthy, t0)
			if !ok {
				t.Errorf("%s did not follow %s turning healthy=%v within %v", gf.Name, down, healthy, followWithin)
				continue
			}
			t.Logf("%s followed %s turning healthy=%v after %v", gf.Name, down, healthy, took.Round(time.Millisecond))
		}
	}
	waitAcked(t, cp, c)
}

// followed sends requests to url until they show that the instance named
// backend is (healthy) or is not (!healthy) used, and reports how long
// after t0 that was, false after followWithin. Not used: 20 requests in a
// row avoid it. Used: one reaches it.
func followed(t *testing.T, url, backend string, healthy bool, t0 time.Time) (time.Duration, bool) {
	t.Helper()
	avoided := 0
	for time.Since(t0) < followWithin {
		_, got := skewRequest(t, url, "")
		switch {
		case healthy && got == backend:
			return time.Since(t0), true
		case !healthy && got != backend:
			if avoided++; avoided == 20 {
				return time.Since(t0), true
			}
		case !healthy:
			avoided = 0
		}
	}
	return 0, false
}

// skewRequest GETs url (with an x-api-key when key is set) and returns the
// status and the instance that answered (X-Spillway-Backend).
func skewRequest(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Spillway-Backend")
}

// skewStatus is the part of a control plane's /status the test reads, in
// the shape every release in the file serves (fields a release lacks stay
// zero).
type skewStatus struct {
	Version struct {
		Revision string `json:"revision"`
	} `json:"version"`
	SnapshotVersion string    `json:"snapshot_version"`
	GFEs            []skewGFE `json:"gfes"`
	LaggingGFEs     []string  `json:"lagging_gfes"`
}

type skewGFE struct {
	ID             string `json:"id"`
	BuildVersion   string `json:"build_version"`
	Streams        int    `json:"streams"`
	Pushed         string `json:"pushed"`
	Acked          string `json:"acked"`
	Nacks          uint64 `json:"nacks"`
	NacksInARow    uint64 `json:"nacks_in_a_row"`
	Lagging        bool   `json:"lagging"`
	DeclaredFields int    `json:"declared_fields"`
	// Dropped is what the control plane left out of the gfe's snapshot
	// (dropped_fields).
	Dropped  []string `json:"dropped_fields"`
	LastNack *struct {
		Error string `json:"error"`
	} `json:"last_nack"`
}

func (s *skewStatus) gfe(t *testing.T, id string) skewGFE {
	t.Helper()
	for _, g := range s.GFEs {
		if g.ID == id {
			return g
		}
	}
	t.Fatalf("control plane /status has no gfe %s: %+v", id, s.GFEs)
	return skewGFE{}
}

func cpStatus(t *testing.T, cp string) *skewStatus {
	t.Helper()
	var st skewStatus
	if err := json.Unmarshal([]byte(skewGet(t, cp+"/status")), &st); err != nil {
		t.Fatalf("control plane /status: %v", err)
	}
	return &st
}

// waitAcked waits until every gfe of c has acknowledged the control
// plane's current snapshot: the version last pushed to it (which, for a
// gfe of an earlier release, may be a form of the snapshot of its own).
func waitAcked(t *testing.T, cp string, c *topology.Cluster) {
	t.Helper()
	err := topology.WaitFor(context.Background(), 20*time.Second, func() (bool, error) {
		st := cpStatus(t, cp)
		for _, gf := range c.GFEs {
			g := st.gfe(t, gf.Name)
			if g.Streams < 1 || g.Acked == "" || (g.Pushed != "" && g.Acked != g.Pushed) || g.Lagging {
				detail := ""
				if g.LastNack != nil {
					detail = "; last NACK: " + g.LastNack.Error
				}
				return false, fmt.Errorf("%s: %d streams, pushed %q, acked %q%s", g.ID, g.Streams, g.Pushed, g.Acked, detail)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not every gfe ACKs the control plane: %v", err)
	}
}

// skewGet returns the body at url.
func skewGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
