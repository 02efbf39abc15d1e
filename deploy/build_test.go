package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestStaticBuild: the binaries deploy/build.sh makes (the Dockerfile's
// build step) need no dynamic loader and no shared library, so they run on
// distroless/static or scratch and on any Linux host; and each prints the
// version and revision it was stamped with.
func TestStaticBuild(t *testing.T) {
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("%s has a %v program header: dynamically linked", bin, p.Type)
				}
			}
			if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
				t.Errorf("%s: imported libraries %q (%v), want none", bin, libs, err)
			}
			if f.Section(".symtab") != nil {
				t.Errorf("%s: has a symbol table, want it stripped (-s -w)", bin)
			}

			out, err := exec.Command(bin, "--version").Output()
			if err != nil {
				t.Fatalf("%s --version: %v", bin, err)
			}
			// "gfe v0.0.0-deploytest (rev deadbeefcafe) go1.26.8"
			want := regexp.MustCompile(`^` + name + ` ` + regexp.QuoteMeta(testVersion) + ` \(rev ` + testRevision + `\) go1\.\d+`)
			if got := strings.TrimSpace(string(out)); !want.MatchString(got) {
				t.Errorf("%s --version = %q, want it to match %s", bin, got, want)
			}
			st, err := os.Stat(bin)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: static, %.1f MB, %s", name, float64(st.Size())/1e6, strings.TrimSpace(string(out)))
		})
	}
}

// TestDockerfileUsesBuildScript: the image is built by the script this
// package tests (the image itself cannot be built here: no Docker engine),
// from distroless/static as a non-root user.
func TestDockerfileUsesBuildScript(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"RUN VERSION=\"$VERSION\" REVISION=\"$REVISION\" deploy/build.sh /out controlplane gfe devpki",
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"USER nonroot:nonroot",
		"COPY --from=build /out/ /usr/local/bin/",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if strings.Count(df, "\nFROM ") != 2 {
		t.Errorf("Dockerfile: want two stages (build, then runtime), got %d FROM lines", strings.Count(df, "\nFROM "))
	}
}
