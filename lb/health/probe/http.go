package probe

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/spillway-lb/spillway/lb/health"
)

// HTTP probes with GET http://<target><Path> and passes when the status code
// is in Config.ExpectedStatus. Redirects are not followed. At most
// MaxBodyBytes of the body are read; the body never affects the result.
// HTTP is immutable and safe for concurrent use.
type HTTP struct {
	client  *http.Client
	path    string
	host    string
	expect  health.StatusRange
	maxBody int64
}

var _ health.Prober = (*HTTP)(nil)

// NewHTTP returns an HTTP prober for cfg's Path, Host and ExpectedStatus.
// cfg should have passed Validate.
func NewHTTP(cfg health.Config, opts Options) *HTTP {
	rt := opts.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:                  nil, // never probe through HTTP_PROXY
			DialContext:            (&net.Dialer{}).DialContext,
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: 64 << 10,
		}
	}
	maxBody := opts.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	return &HTTP{
		client: &http.Client{
			Transport: rt,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		path:    cfg.Path,
		host:    cfg.Host,
		expect:  cfg.ExpectedStatus,
		maxBody: maxBody,
	}
}

// Probe sends one GET to t and checks the status code.
func (p *HTTP) Probe(ctx context.Context, t health.Target) health.Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Addr+p.path, nil)
	if err != nil {
		return failure(ctx, "http", t, err)
	}
	if p.host != "" {
		req.Host = p.host
	}
	req.Header.Set("User-Agent", "spillway-health/1")
	resp, err := p.client.Do(req)
	if err != nil {
		return failure(ctx, "http", t, err)
	}
	// Drain a bounded amount so a small body is read to its end; a larger
	// one is cut off by Close. Read errors do not matter: the status is in.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, p.maxBody))
	resp.Body.Close()
	if !p.expect.Contains(resp.StatusCode) {
		return failure(ctx, "http", t, fmt.Errorf("%w: %d not in %v", ErrStatus, resp.StatusCode, p.expect))
	}
	return health.Result{}
}
