package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// staleCitation matches what comments and docs must no longer cite: the
// old external DESIGN.md ("DESIGN.md §3", "DESIGN §4", "DESIGN row 7") and
// issue numbers ("issue #14", "issue 10, finding 7", "issue\n// #12",
// "finding #10.1", "#10.8"). The spec is docs/design.md; a citation names
// one of its sections ("docs/design.md §3 rule 5") or the rule in words.
var staleCitation = regexp.MustCompile(`\bDESIGN(\.md\b|\s+§|\s+row\b)|\b[Ii]ssues?(\s|//|#)+#?[0-9]+\b|\b[Ff]indings?\s+#[0-9]|(^|[\s(])#[0-9]+\.[0-9]`)

// citedFiles are the extensions, besides .go, whose whole text is read.
var citedFiles = map[string]bool{".md": true, ".proto": true, ".yaml": true, ".yml": true, ".sh": true, ".service": true}

// TestNoStaleCitations: no Go comment and no doc, config or script in the
// repository cites the old DESIGN.md or an issue number. It reads every
// file of the tree (Go files' comments only: string literals are data),
// so that a citation cannot drift back.
func TestNoStaleCitations(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	read := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && rel != ".ci" && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "docs/citations_test.go" { // its comments show what it refuses
			return nil
		}
		ext := filepath.Ext(rel)
		if ext != ".go" && !citedFiles[ext] && !strings.HasPrefix(rel, ".ci/") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		read++
		for _, text := range citable(t, rel, src) {
			for _, loc := range staleCitation.FindAllStringIndex(text.s, -1) {
				line := text.line + strings.Count(text.s[:loc[0]], "\n")
				m := strings.Join(strings.Fields(text.s[loc[0]:loc[1]]), " ")
				bad = append(bad, rel+":"+strconv.Itoa(line)+": "+m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if read < 500 {
		t.Fatalf("read %d files, want the repository's", read)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("%s: cite a section of docs/design.md or name the rule", b)
	}
}

// citedText is a piece of a file that may cite, with its first line.
type citedText struct {
	s    string
	line int
}

// citable returns the parts of a file that are prose: a Go file's comments
// (each comment group whole, so that a citation broken over two lines is
// seen), any other file entire.
func citable(t *testing.T, rel string, src []byte) []citedText {
	if filepath.Ext(rel) != ".go" {
		return []citedText{{string(src), 1}}
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		t.Errorf("%s: %v", rel, err)
		return nil
	}
	var out []citedText
	for _, g := range f.Comments {
		var b strings.Builder
		for _, c := range g.List {
			b.WriteString(c.Text)
			b.WriteByte('\n')
		}
		out = append(out, citedText{b.String(), fset.Position(g.Pos()).Line})
	}
	return out
}

// TestStaleCitationPattern: what the sweep refuses and what it lets be.
func TestStaleCitationPattern(t *testing.T) {
	for _, tc := range []struct {
		text  string
		stale bool
	}{
		{"rules of DESIGN.md §3", true},
		{"(DESIGN §4)", true},
		{"DESIGN.md\n// §7", true},
		{"DESIGN row 7 end to end", true},
		{"the fast path (issue #14)", true},
		{"(issue 10, finding 7)", true},
		{"fast path (issue\n// #14), as strictly", true},
		{"Issue #9's target", true},
		{"finding #10.1 and the gossip half of #10.8", true},
		{"Finding #10.1: gossip", true},
		{"the gossip half of #10.8.", true},
		{"docs/design.md §3 rule 5", false},
		{"[design.md §9](design.md#9-security-and-deployment)", false},
		{"the first security review, finding 7 (SECURITY.md)", false},
		{"go.dev/issue/75804", false},
		{"knative/serving#13284", false},
		{`"issue-10-the-cookie-secret"`, false},
		{"a cookie the gfe issues, seed 1", false},
		{"RSA PKCS #1 v1.5", false},
		{"see [Copy](#4-copy-each-hosts-directory)", false},
	} {
		if got := staleCitation.MatchString(tc.text); got != tc.stale {
			t.Errorf("%q: stale = %v, want %v", tc.text, got, tc.stale)
		}
	}
}
