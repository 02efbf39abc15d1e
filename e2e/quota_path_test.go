package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/testbackend"
	"github.com/spillway-lb/spillway/internal/topology"
)

// quotaPathNet is the 127.N.0.0/16 of TestQuotaPathBypassEndToEnd.
const quotaPathNet = 91

// TestQuotaPathBypassEndToEnd (second security review, items 6 and 16) on
// real processes: a control plane serving AllocateQuota, a gfe charging
// /api/ by requests and uploads by bytes, and its backends. The paths that
// were served without an API key — //api/x, /API/x (HTTP/1.1 and h2c) and
// /api\x — get 401 or 400 and no backend serves them; with a key,
// //api/secret reaches the backend as /api/secret; the path residue is
// refused; and 23 uploads of 5,000 bytes against 1,000 bytes a minute,
// chunked or over h2c without a length, get 411, not 200. Run with
// SPILLWAY_E2E_FAST_PATH=0 too: HTTP/1.1 then goes through net/http.
func TestQuotaPathBypassEndToEnd(t *testing.T) {
	spec := topology.Spec{
		Net:     quotaPathNet,
		Regions: []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 2, Rate: 1000}},
		Sites:   []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		EditConfig: func(yaml string) string {
			return yaml + `quota:
  metrics: [{name: calls, default_limit: 600}, {name: upload, unit: bytes, default_limit: 1000}]
  charges:
    - {service: web, path_prefix: /api/, metric: calls}
    - {service: web, method: POST, path_prefix: /upload/, metric: upload}
  consumers: [{api_key: acme-key-0001, project: acme}]
`
		},
	}
	c := startCluster(t, spec)
	gf := c.GFE("nyc")
	addr := strings.TrimPrefix(gf.URL, "http://")
	served := func() (n uint64) {
		t.Helper()
		for _, a := range c.Instances["us-east"] {
			st, err := instanceStats(a)
			if err != nil {
				t.Fatal(err)
			}
			n += st.Served
		}
		return n
	}

	before := served()
	for _, tt := range []struct {
		target string
		want   int
	}{
		{"/api/x", 401},
		{"//api/x", 401},
		{"/API/x", 401},
		{`/api\x`, 400},
		{"/api;v=1/x", 401},
		{`/a\..\x`, 400},
		{"/a/..;/x", 400},
		{"/a/%252e%252e/x", 400},
	} {
		if got := rawStatus(t, addr, "GET "+tt.target+" HTTP/1.1\r\nHost: x\r\n\r\n"); got != tt.want {
			t.Errorf("HTTP/1.1 GET %s without a key: %d, want %d", tt.target, got, tt.want)
		}
	}
	h2 := h2Client(&connLog{}, nil, "")
	// Redirects not followed: a backend's own redirect of //api/x (its
	// ServeMux cleans paths) must not pass for the gfe's 401.
	h2.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, target := range []string{"//api/x", "/API/x"} {
		req, _ := http.NewRequest(http.MethodGet, gf.URL+target, nil)
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatalf("h2c GET %s: %v", target, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("h2c GET %s without a key: %s %d, want HTTP/2 401", target, resp.Proto, resp.StatusCode)
		}
	}
	if n := served() - before; n != 0 {
		t.Errorf("the backends served %d of the refused requests, want 0", n)
	}

	code, body := rawExchange(t, addr, "GET //api/secret HTTP/1.1\r\nHost: x\r\nX-Api-Key: acme-key-0001\r\nConnection: close\r\n\r\n", true)
	var reply testbackend.Reply
	if err := json.Unmarshal(body, &reply); code != http.StatusOK || err != nil || reply.Path != "/api/secret" {
		t.Errorf("GET //api/secret with a key: %d %q, want 200 from a backend that got /api/secret", code, body)
	}

	before = served()
	upload := strings.Repeat("x", 5000)
	codes := map[int]int{}
	for range 23 {
		codes[rawStatus(t, addr, fmt.Sprintf("POST /upload/x HTTP/1.1\r\nHost: x\r\nX-Api-Key: acme-key-0001\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(upload), upload))]++
	}
	if codes[http.StatusLengthRequired] != 23 {
		t.Errorf("23 chunked uploads of 5,000 B against 1,000 B/min: %v, want 23 × 411", codes)
	}
	req, _ := http.NewRequest(http.MethodPost, gf.URL+"/upload/x", io.NopCloser(strings.NewReader(upload))) // no length: none sent
	req.Header.Set("X-Api-Key", "acme-key-0001")
	resp, err := h2.Do(req)
	if err != nil {
		t.Fatalf("h2c upload: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusLengthRequired {
		t.Errorf("h2c upload of 5,000 B without a length: %s %d, want HTTP/2 411", resp.Proto, resp.StatusCode)
	}
	if n := served() - before; n != 0 {
		t.Errorf("the backends served %d length-less uploads, want 0", n)
	}
	if got := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_quota_decisions_total", "result=length_required"); got != 24 {
		t.Errorf("length_required decisions: %v, want 24", got)
	}
}
