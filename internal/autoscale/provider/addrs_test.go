package provider

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAddresses(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		limit   int
		want    []string
		wantErr string
	}{
		{name: "empty", out: "", limit: 2, want: nil},
		{name: "one, newline", out: "127.0.0.1:9101\n", limit: 1, want: []string{"127.0.0.1:9101"}},
		{name: "one, no newline", out: "127.0.0.1:9101", limit: 1, want: []string{"127.0.0.1:9101"}},
		{name: "fewer than asked", out: "10.0.0.1:80\n", limit: 3, want: []string{"10.0.0.1:80"}},
		{name: "kinds of host", out: "[::1]:9101\nweb-1.us-east.internal:443\n10.1.2.3:65535\n", limit: 3,
			want: []string{"[::1]:9101", "web-1.us-east.internal:443", "10.1.2.3:65535"}},
		{name: "too many", out: "a:1\nb:2\nc:3\n", limit: 2, wantErr: `line 3 "c:3": more than the 2 addresses asked for`},
		{name: "log line", out: "starting instance...\n10.0.0.1:80\n", limit: 2, wantErr: `line 1 "starting instance...": whitespace at byte 9`},
		{name: "empty line", out: "a:1\n\nb:2\n", limit: 3, wantErr: `line 2 "": empty line`},
		{name: "two trailing newlines", out: "a:1\n\n", limit: 3, wantErr: `line 2 "": empty line`},
		{name: "crlf", out: "a:1\r\n", limit: 1, wantErr: `line 1 "a:1\r": whitespace at byte 4`},
		{name: "no port", out: "10.0.0.1\n", limit: 1, wantErr: `line 1 "10.0.0.1": want host:port`},
		{name: "port 0", out: "a:0\n", limit: 1, wantErr: "port must be a number in 1..65535"},
		{name: "port too big", out: "a:65536\n", limit: 1, wantErr: "port must be a number in 1..65535"},
		{name: "port leading zero", out: "a:080\n", limit: 1, wantErr: "without leading zeros"},
		{name: "port sign", out: "a:+80\n", limit: 1, wantErr: "port must be a number"},
		{name: "named port", out: "a:http\n", limit: 1, wantErr: "port must be a number"},
		{name: "empty host", out: ":80\n", limit: 1, wantErr: `line 1 ":80": empty host`},
		{name: "bare ipv6", out: "::1:80\n", limit: 1, wantErr: "want host:port"},
		{name: "bracketed ipv4", out: "[10.0.0.1]:80\n", limit: 1, wantErr: "bracketed host is not an IPv6 address"},
		{name: "ipv6 zone", out: "[fe80::1%eth0]:80\n", limit: 1, wantErr: "bracketed host is not an IPv6 address"},
		{name: "underscore", out: "web_1:80\n", limit: 1, wantErr: `host has '_'`},
		{name: "label dash", out: "-web:80\n", limit: 1, wantErr: "starts or ends with '-'"},
		{name: "empty label", out: "web..internal:80\n", limit: 1, wantErr: "empty label in host"},
		{name: "long label", out: strings.Repeat("a", 64) + ":80\n", limit: 1, wantErr: "host label longer than 63 bytes"},
		{name: "duplicate", out: "a:1\nb:2\na:1\n", limit: 3, wantErr: `line 3 "a:1": repeats line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAddresses([]byte(tt.out), tt.limit)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrOutput) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseAddresses(%q) error = %v, want ErrOutput containing %q", tt.out, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddresses(%q): %v", tt.out, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseAddresses(%q) mismatch (-want +got):\n%s", tt.out, diff)
			}
		})
	}
}

// FuzzParseAddresses checks ParseAddresses' guarantees on any output: an
// error wraps ErrOutput and names a line; a success is at most limit
// distinct addresses, each valid alone, that read back the same once
// written one per line.
func FuzzParseAddresses(f *testing.F) {
	for _, s := range []string{"", "127.0.0.1:9101\n", "[::1]:1\nweb-1.internal:65535", "a:1\n\nb:2", "a:080\n", "x y:1\n", "[fe80::1%eth0]:80"} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, out []byte, limit int) {
		limit = limit%8 + 1
		if limit < 1 {
			limit += 8
		}
		got, err := ParseAddresses(out, limit)
		if err != nil {
			if !errors.Is(err, ErrOutput) || !strings.Contains(err.Error(), ": line ") {
				t.Fatalf("error %v does not wrap ErrOutput or name a line", err)
			}
			return
		}
		if len(got) > limit {
			t.Fatalf("%d addresses, limit %d", len(got), limit)
		}
		seen := map[string]bool{}
		for _, a := range got {
			if p := checkAddress([]byte(a)); p != "" {
				t.Fatalf("returned %q, which is invalid alone: %s", a, p)
			}
			if seen[a] {
				t.Fatalf("returned %q twice", a)
			}
			seen[a] = true
		}
		again, err := ParseAddresses([]byte(strings.Join(got, "\n")), limit)
		if err != nil || !cmp.Equal(again, got, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") })) {
			t.Fatalf("rewritten output read back as %q, %v; want %q", again, err, got)
		}
	})
}
