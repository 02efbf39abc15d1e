package httpproxy

import (
	"net/http"
	"testing"
)

func TestIsGRPC(t *testing.T) {
	tests := []struct {
		ct   string
		want bool
	}{
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc;charset=utf-8", true},
		{"application/grpc-web", false},
		{"application/grpc-web+proto", false},
		{"application/json", false},
		{"", false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.ct != "" {
			h.Set("Content-Type", tt.ct)
		}
		if got := isGRPC(h); got != tt.want {
			t.Errorf("isGRPC(%q) = %v, want %v", tt.ct, got, tt.want)
		}
	}
}
