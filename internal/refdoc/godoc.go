package refdoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// sourceDocs holds the doc comments of a package's struct types and their
// fields, as written in its source.
type sourceDocs struct {
	types  map[string]string            // type name → doc
	fields map[string]map[string]string // type name → field name → doc
	order  map[string][]string          // type name → field names in order
}

// parseDocs reads the doc comments of the non-test Go files in dir.
func parseDocs(dir string) (*sourceDocs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	d := &sourceDocs{types: map[string]string{}, fields: map[string]map[string]string{}, order: map[string][]string{}}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				d.types[ts.Name.Name] = doc.Text()
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				fd := map[string]string{}
				prev := ""
				for _, fl := range st.Fields.List {
					text := fl.Doc.Text()
					for _, n := range fl.Names {
						t := text
						// A field without a comment of its own, named in the
						// one before it ("MinPendingWait and
						// PendingWaitColdStarts give ..."), shares it.
						if t == "" && strings.Contains(prev, n.Name) {
							t = prev
						}
						fd[n.Name] = t
						d.order[ts.Name.Name] = append(d.order[ts.Name.Name], n.Name)
					}
					if text != "" {
						prev = text
					}
				}
				d.fields[ts.Name.Name] = fd
			}
		}
	}
	return d, nil
}

var (
	spaces   = regexp.MustCompile(`\s+`)
	goIdent  = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*(\.[A-Z][A-Za-z0-9]*)?\b`)
	starWord = regexp.MustCompile(`\*`)
)

// markdown turns a doc comment into Markdown paragraphs: lines joined,
// Go names of schema fields replaced by their YAML keys (own maps Go
// field names of the struct at hand to keys; qualified maps
// "Type.Field" to paths), stars and angle brackets escaped.
func markdown(doc string, own, qualified map[string]string) string {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(doc), "\n\n") {
		p = strings.TrimSpace(spaces.ReplaceAllString(p, " "))
		if p == "" {
			continue
		}
		p = starWord.ReplaceAllString(p, `\*`)
		p = strings.ReplaceAll(p, "<", "&lt;")
		p = goIdent.ReplaceAllStringFunc(p, func(id string) string {
			if k, ok := qualified[id]; ok {
				return "`" + k + "`"
			}
			if k, ok := own[id]; ok {
				return "`" + k + "`"
			}
			return id
		})
		paras = append(paras, p)
	}
	return strings.Join(paras, "\n\n")
}

// fileDoc returns the package doc comment of the Go file at path.
func fileDoc(path string) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	return f.Doc.Text(), nil
}
