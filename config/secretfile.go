package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
				b, err := os.ReadFile(name)
				if err != nil {
					p.add(path, fmt.Sprintf("read: %v", err))
					continue
				}
				*f.secret = strings.TrimRight(string(b), "\r\n")
			}
			*f.file = ""
		}
	}
}
