package daemonflags

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrCheckFailed is what CheckFiles returns when a file did not pass: its
// problems are printed already, so the command exits 1 without adding to
// them.
var ErrCheckFailed = errors.New("check failed")

// CheckFiles runs check on every file (what a daemon's --check-config
// does) and prints "FILE: ok" to out for each that passes, or each of its
// problems on a line of its own to errOut, every line starting with
// "FILE: " (a problem that names the file already, as config.FieldError
// does, is printed as it is). It returns ErrCheckFailed when any file
// failed, and an error without printing anything when files is empty.
func CheckFiles(out, errOut io.Writer, files []string, check func(path string) error) error {
	if len(files) == 0 {
		return errors.New("--check-config: name the files to check (or --config FILE)")
	}
	failed := false
	for _, f := range files {
		err := check(f)
		if err == nil {
			fmt.Fprintf(out, "%s: ok\n", f)
			continue
		}
		failed = true
		for _, line := range strings.Split(err.Error(), "\n") {
			if line = strings.TrimRight(line, " "); line == "" {
				continue
			}
			if !strings.HasPrefix(line, f+":") {
				line = f + ": " + line
			}
			fmt.Fprintln(errOut, line)
		}
	}
	if failed {
		return ErrCheckFailed
	}
	return nil
}
