package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.*)$`)
	fence   = regexp.MustCompile("^\\s*```")
)

// pages returns the Markdown pages the links test reads: the repository
// root's and docs/'s (docs/security/ included).
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"../*.md", "*.md", "security/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	if len(out) < 10 {
		t.Fatalf("found %d pages, want the repository's", len(out))
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a Markdown page
// (lower case, punctuation dropped, spaces as dashes, "-1", "-2" for
// repeats), outside code blocks.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of a heading's text.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("—–→×≥≤·…’", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks: every relative link of the repository's pages names a file
// that exists and, with #anchor, a heading of that page.
func TestLinks(t *testing.T) {
	texts := map[string]string{}
	read := func(path string) (string, bool) {
		if s, ok := texts[path]; ok {
			return s, true
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		texts[path] = string(b)
		return texts[path], true
	}
	for _, page := range pages(t) {
		text, _ := read(page)
		inCode := false
		for n, line := range strings.Split(text, "\n") {
			if fence.MatchString(line) {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %s: no such file %s", page, n+1, target, path)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not a page", page, n+1, target)
					continue
				}
				body, _ := read(path)
				if !anchors(body)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", page, n+1, target, path, anchor)
				}
			}
		}
	}
}

// TestSlug: the anchors GitHub gives headings of the kinds these pages
// use.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"The plan over xDS: Envoy and proxyless gRPC":                              "the-plan-over-xds-envoy-and-proxyless-grpc",
		"3. Waterfall by Region":                                                   "3-waterfall-by-region",
		"Autoscaler (`internal/autoscale/...`, `lb/autoscale`)":                    "autoscaler-internalautoscale-lbautoscale",
		"`services[].feedback`":                                                    "servicesfeedback",
		"The gfe's pending queue and capacity requests":                            "the-gfes-pending-queue-and-capacity-requests",
		"In front of your own backend in five minutes":                             "in-front-of-your-own-backend-in-five-minutes",
		"Security notes: bounds (first security review, findings 4 and 7)":         "security-notes-bounds-first-security-review-findings-4-and-7",
		"Finding 2 — the control-plane gRPC API had no TLS and handed out secrets": "finding-2--the-control-plane-grpc-api-had-no-tls-and-handed-out-secrets",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
