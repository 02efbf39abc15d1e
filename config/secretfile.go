package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// readSecretFiles moves the content of every session_affinity
// cookie_secret_file and previous_cookie_secret_file into the secret it
// stands for, reading paths relative to dir, and clears the file field.
// With dir "" (Parse: data only) a set file field is a problem. Messages
// name the path of the file, never its content.
func readSecretFiles(c *Config, dir string, p *problems) {
	for i := range c.Services {
		a := &c.Services[i].SessionAffinity
		ap := fmt.Sprintf("services[%d].session_affinity", i)
		for _, f := range []struct {
			key          string
			file, secret *string
		}{
			{"cookie_secret", &a.CookieSecretFile, &a.CookieSecret},
			{"previous_cookie_secret", &a.PreviousCookieSecretFile, &a.PreviousCookieSecret},
		} {
			if *f.file == "" {
				continue
			}
			path := ap + "." + f.key + "_file"
			switch {
			case dir == "":
				p.add(path, "not read from a configuration held in memory; a control plane sends the secret itself")
			case *f.secret != "":
				p.add(path, fmt.Sprintf("exclusive with %s: set one of them", f.key))
			default:
				name := *f.file
				if !filepath.IsAbs(name) {
					name = filepath.Join(dir, name)
				}
				s, err := readSecretFile(name)
				if err != nil {
					p.add(path, err.Error())
					continue
				}
				*f.secret = s
			}
			*f.file = ""
		}
	}
}

// Bounds of a secret file (cookie_secret_file): a secret is one line of
// printable ASCII, at least minCookieSecret bytes (the HMAC key's size)
// and at most maxSecretFile (a generous 4 KiB: a base64 key of 3 KiB).
const maxSecretFile = 4096

// secretFileRefused are the trees no secret file may be in: their files
// are the kernel's views of processes and devices (/proc/self/environ
// holds the process's environment, /dev/stdin its input), never an
// operator's secret, and a config that names one would ship its content to
// every gfe.
var secretFileRefused = []string{"/proc", "/sys", "/dev"}

// readSecretFile returns the secret held in the file name, without its
// trailing newline. It refuses, with an error that names the file and
// never shows its content: a path that is, or whose symbolic links lead,
// under /proc, /sys or /dev; anything but a regular file; a file larger
// than maxSecretFile; content that is not printable ASCII (a byte below
// 0x20 or above 0x7e once the trailing newline is cut); a secret shorter
// than minCookieSecret.
func readSecretFile(name string) (string, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	if err := notKernelTree(name, abs); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		// Missing, or not reachable: say it as opening it says it.
		if f, oerr := os.Open(name); oerr != nil {
			err = oerr
		} else {
			f.Close()
		}
		return "", fmt.Errorf("read: %w", err)
	}
	if err := notKernelTree(name, real); err != nil {
		return "", err
	}
	// Stat before opening: opening a named pipe waits for a writer. The
	// file is opened without waiting (O_NONBLOCK) and looked at again, in
	// case it changed in between.
	if fi, err := os.Stat(real); err != nil {
		return "", fmt.Errorf("read: %w", err)
	} else if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file (%v)", name, fi.Mode().Type())
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file (%v)", name, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxSecretFile || fi.Size() > maxSecretFile {
		return "", fmt.Errorf("%s is larger than %d bytes: a secret file holds one line", name, maxSecretFile)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if i := strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
		return "", fmt.Errorf("%s holds a byte that is not printable ASCII (at offset %d): a secret file holds one line of text", name, i)
	}
	if len(s) < minCookieSecret {
		return "", fmt.Errorf("%s holds %d bytes, want at least %d (generate one with: openssl rand -base64 48)", name, len(s), minCookieSecret)
	}
	return s, nil
}

// notKernelTree returns an error naming name when path, its absolute form
// or where its links lead, is under one of secretFileRefused.
func notKernelTree(name, path string) error {
	for _, tree := range secretFileRefused {
		if path == tree || strings.HasPrefix(path, tree+"/") {
			return fmt.Errorf("%s is under %s, which holds the kernel's files, not secrets: name a regular file of its own", name, tree)
		}
	}
	return nil
}
