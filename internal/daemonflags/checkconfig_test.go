package daemonflags

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestCheckFiles: every file gets "FILE: ok" or its problems, one a line,
// each starting with the file (unless it names the file already); any
// failure is ErrCheckFailed.
func TestCheckFiles(t *testing.T) {
	check := func(path string) error {
		switch path {
		case "a.yaml":
			return nil
		case "b.yaml":
			return errors.Join(fmt.Errorf("b.yaml: x.y: bad"), errors.New("apply config to health: services[0].health_check: no"))
		}
		return errors.New("open c.yaml: no such file")
	}
	var out, errOut bytes.Buffer
	err := CheckFiles(&out, &errOut, []string{"a.yaml", "b.yaml", "c.yaml"}, check)
	if !errors.Is(err, ErrCheckFailed) {
		t.Errorf("err = %v, want ErrCheckFailed", err)
	}
	if got, want := out.String(), "a.yaml: ok\n"; got != want {
		t.Errorf("out %q, want %q", got, want)
	}
	want := "b.yaml: x.y: bad\nb.yaml: apply config to health: services[0].health_check: no\nc.yaml: open c.yaml: no such file\n"
	if got := errOut.String(); got != want {
		t.Errorf("errOut %q, want %q", got, want)
	}
	out.Reset()
	if err := CheckFiles(&out, &errOut, []string{"a.yaml"}, check); err != nil || out.String() != "a.yaml: ok\n" {
		t.Errorf("one good file: %v, %q", err, out.String())
	}
	if err := CheckFiles(&out, &errOut, nil, check); err == nil || errors.Is(err, ErrCheckFailed) {
		t.Errorf("no file: %v, want a usage error", err)
	}
}
