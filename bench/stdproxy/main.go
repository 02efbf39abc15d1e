// Command stdproxy is the data-plane benchmark's yardstick for Go: a stock
// httputil.ReverseProxy in front of one origin, with the gfe's Transport
// settings (keep-alive pool of 256 per host) and nothing else: no routing,
// no picker, no metrics, no BufferPool. bench/proxy.sh runs it as the
// "stdlib" target, so that the table separates what net/http costs from
// what the gfe adds.
//
//	stdproxy --listen 127.0.0.1:8082 --origin 127.0.0.1:9001
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8082", "client-facing listener")
	origin := flag.String("origin", "", "origin host:port (required)")
	flag.Parse()
	if err := run(*listen, *origin); err != nil {
		fmt.Fprintln(os.Stderr, "stdproxy:", err)
		os.Exit(1)
	}
}

func run(listen, origin string) error {
	if origin == "" {
		return errors.New("--origin is required")
	}
	rp, err := newProxy(origin)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
	return srv.ListenAndServe()
}

// newProxy returns a stock ReverseProxy to origin (host:port) that keeps the
// client's Host and adds X-Forwarded-For, as the gfe does.
func newProxy(origin string) (*httputil.ReverseProxy, error) {
	u, err := url.Parse("http://" + origin)
	if err != nil || origin == "" || u.Host != origin {
		return nil, fmt.Errorf("origin %q: want host:port", origin)
	}
	tr := &http.Transport{
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host
			r.SetXForwarded()
		},
	}, nil
}
