package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestStaticBuild: the binaries deploy/build.sh makes (the images' build
// step) need no dynamic loader and no shared library, so they run FROM
// scratch and on any Linux host; and each prints the
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

// TestImagesShareTheBuildStep: deploy/Dockerfile builds the image with
// deploy/rootfs.sh, the script deploy/Containerfile's context comes from
// (TestContainerImage builds and runs that one), and the two runtime
// stages are the same lines: one image, two ways to build it.
func TestImagesShareTheBuildStep(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	df, cf := read("Dockerfile"), read("Containerfile")
	if want := `RUN VERSION="$VERSION" REVISION="$REVISION" deploy/rootfs.sh /rootfs controlplane gfe devpki`; !strings.Contains(df, want) {
		t.Errorf("Dockerfile lacks %q", want)
	}
	if n := strings.Count(df, "\nFROM "); n != 2 {
		t.Errorf("Dockerfile: want two stages (build, then runtime), got %d FROM lines", n)
	}
	runtime := func(name, s string) string {
		i := strings.Index(s, "\nFROM scratch\n")
		if i < 0 {
			t.Fatalf("%s has no FROM scratch stage", name)
		}
		return s[i:]
	}
	d := strings.Replace(runtime("Dockerfile", df), "COPY --from=build /rootfs/ /\n", "COPY . /\n", 1)
	if c := runtime("Containerfile", cf); d != c {
		t.Errorf("runtime stages differ:\nDockerfile:%s\nContainerfile:%s", d, c)
	}
	if !strings.Contains(cf, "USER 65532:65532\n") || strings.Count(cf, "\nFROM ") != 1 {
		t.Errorf("Containerfile: want one stage FROM scratch as user 65532")
	}
}
