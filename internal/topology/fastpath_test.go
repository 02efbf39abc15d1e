package topology

import "testing"

func TestWithFastPath(t *testing.T) {
	in := `services:
  - name: web
    health_check: {protocol: http, path: /healthz}
listeners:
  - name: a
    protocol: http
    port: 8081
  - {name: b, protocol: http, port: 8082}
  - name: c
    protocol: https
    port: 8443
  - protocol: http
    port: 8083
quota:
  x: {protocol: http}
`
	want := `services:
  - name: web
    health_check: {protocol: http, path: /healthz}
listeners:
  - name: a
    protocol: http
    fast_path: false
    port: 8081
  - {name: b, fast_path: false, protocol: http, port: 8082}
  - name: c
    protocol: https
    fast_path: false
    port: 8443
  - protocol: http
    fast_path: false
    port: 8083
quota:
  x: {protocol: http}
`
	if got := WithFastPath(in, false); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
