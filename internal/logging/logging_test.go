package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name, format, level string
		wantJSON, wantErr   bool
		wantLine            bool
	}{
		{"json info", "json", "info", true, false, true},
		{"auto on a buffer is json", "auto", "info", true, false, true},
		{"console", "console", "info", false, false, true},
		{"level filters", "json", "error", true, false, false},
		{"bad format", "xml", "info", false, true, false},
		{"bad level", "json", "loud", false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, tt.format, tt.level, "gfe")
			if (err != nil) != tt.wantErr {
				t.Fatalf("New err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			log.Info().Str("k", "v").Msg("hello")
			out := buf.String()
			if !tt.wantLine {
				if out != "" {
					t.Fatalf("got output %q, want none", out)
				}
				return
			}
			if !strings.Contains(out, "hello") {
				t.Fatalf("output %q lacks the message", out)
			}
			var m map[string]any
			isJSON := json.Unmarshal([]byte(out), &m) == nil
			if isJSON != tt.wantJSON {
				t.Fatalf("output %q: json = %v, want %v", out, isJSON, tt.wantJSON)
			}
			if isJSON && m["daemon"] != "gfe" {
				t.Errorf("daemon field = %v, want gfe", m["daemon"])
			}
		})
	}
}
