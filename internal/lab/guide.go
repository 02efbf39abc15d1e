package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The deployment guide, docs/DEPLOY.md, run on lab hosts (Guide).
//
// The guide's commands are in fenced sh blocks, each right after a comment
// that says where it runs: <!-- host: cp-1 cp-2 --> (as root on each host
// named, in /tmp/spillway, the directory the admin staged for it),
// <!-- host: admin --> (the operator's workstation, in a checkout of the
// repository), or <!-- copy: ... --> (the one step that moves files between
// hosts). Its host table gives every host's address.

// GuideBlock is one fenced sh block of the guide.
type GuideBlock struct {
	// Line is the line of the opening fence, from 1.
	Line int
	// Comment is the text of the <!-- ... --> comment right before the
	// fence ("host: cp-1 cp-2", "copy: ..."), or "" when there is none.
	Comment string
	// Body is the block's text, without the fences.
	Body string
}

// Hosts returns the hosts a "host:" block runs on, nil for other blocks.
func (b GuideBlock) Hosts() []string {
	rest, ok := strings.CutPrefix(b.Comment, "host: ")
	if !ok {
		return nil
	}
	return strings.Fields(rest)
}

// ParseGuide returns the sh blocks of the Markdown text, in order.
func ParseGuide(text string) []GuideBlock {
	lines := strings.Split(text, "\n")
	comment := regexp.MustCompile(`^<!-- (.*) -->$`)
	var blocks []GuideBlock
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		start := i
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		if lines[start] != "```sh" {
			continue
		}
		b := GuideBlock{Line: start + 1, Body: strings.Join(lines[start+1:min(i, len(lines))], "\n")}
		if start > 0 {
			if m := comment.FindStringSubmatch(lines[start-1]); m != nil {
				b.Comment = m[1]
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// GuideHosts returns the hosts of the guide's host table — the rows whose
// second cell is an IPv4 address — by name, in table order.
func GuideHosts(text string) ([]string, map[string]netip.Addr) {
	row := regexp.MustCompile(`^\| ([a-z0-9-]+) \| (\d+\.\d+\.\d+\.\d+) \|`)
	var names []string
	addrs := map[string]netip.Addr{}
	for _, l := range strings.Split(text, "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a, err := netip.ParseAddr(m[2])
		if err != nil {
			continue
		}
		names = append(names, m[1])
		addrs[m[1]] = a
	}
	return names, addrs
}

// guideCopy is the only copy step the guide may have: what Guide.Run does
// in its place.
const guideCopy = "copy: admin:dist/HOST/ -> HOST:/tmp/spillway/, for every host"

// Guide is a lab of the guide's hosts, with nothing running in them until
// the guide's blocks start it: each host of the guide's table is a network
// namespace with the table's address, and admin is one more, at .255.1 of
// the network. A host's blocks run as root in its namespace, in a mount
// namespace of their own where /etc, /usr, /root and /var are overlays
// whose upper layers belong to the host (so installing binaries, units,
// users and files touches only the host) and /tmp is the host's own; the
// layers outlive each block, so a host keeps what its blocks made. systemd
// is not running: systemctl and systemd-run are the lab's stand-ins
// (internal/lab/fakesystemd), which run a unit's ExecStart as its User
// with its EnvironmentFile and AmbientCapabilities, and stop it with
// SIGTERM; the units' sandboxing directives are not applied (the tests of
// package deploy check them with systemd-analyze). admin's blocks run in a
// checkout made of symbolic links to the repository's files, so that what
// they build and write (dist/, pki/) stays out of the repository.
type Guide struct {
	Lab *Lab
	// Hosts are the guide's hosts, in table order; Addrs their addresses.
	Hosts []string
	Addrs map[string]netip.Addr
	// Work is admin's checkout; fs holds each host's layers.
	Work string
	fs   string
	// path is the PATH of every block.
	path string
}

// UpGuide makes the hosts of the guide text, after Clean: a switch
// namespace and, in network (a /16 that holds every address of the
// table), one namespace per host plus admin. repo is the repository
// admin's checkout links to; fakesystemd the stand-in binary, installed as
// systemctl and systemd-run.
func UpGuide(ctx context.Context, cfg Config, text, repo, fakesystemd string) (g *Guide, err error) {
	cfg.defaults()
	if cfg.StateDir == "" {
		return nil, errors.New("lab: Config.StateDir is required")
	}
	names, addrs := GuideHosts(text)
	if len(names) == 0 {
		return nil, errors.New("lab: the guide has no host table")
	}
	var hosts []*Host
	for _, n := range names {
		if !cfg.Network.Contains(addrs[n]) {
			return nil, fmt.Errorf("lab: guide host %s has address %s, outside %s", n, addrs[n], cfg.Network)
		}
		hosts = append(hosts, &Host{Name: n, Addrs: []netip.Addr{addrs[n]}})
	}
	a := cfg.Network.Masked().Addr().As4()
	a[2], a[3] = 255, 1
	hosts = append(hosts, &Host{Name: "admin", Addrs: []netip.Addr{netip.AddrFrom4(a)}})
	g = &Guide{Hosts: names, Addrs: addrs, Work: filepath.Join(cfg.StateDir, "admin"), fs: filepath.Join(cfg.StateDir, "hosts")}
	if g.Lab, err = UpHosts(ctx, cfg, hosts); err != nil {
		return nil, err
	}
	made := g.Lab
	defer func() {
		if err != nil {
			made.Down(context.WithoutCancel(ctx)) // g is nil by then
		}
	}()
	// The system directories, then this process's (admin needs go).
	g.path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + os.Getenv("PATH")
	if err := linkCheckout(repo, g.Work); err != nil {
		return nil, err
	}
	fake, err := os.ReadFile(fakesystemd)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	for _, n := range names {
		// The stand-ins are the host's /usr/local/sbin/systemctl and
		// systemd-run, ahead of the machine's /usr/bin in PATH.
		sbin := filepath.Join(g.fs, n, "usr.u", "local", "sbin")
		for _, d := range []string{filepath.Join(g.fs, n, "tmp", "spillway"), sbin} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("lab: %w", err)
			}
		}
		if err := os.WriteFile(filepath.Join(sbin, "systemctl"), fake, 0o755); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		if err := os.Symlink("systemctl", filepath.Join(sbin, "systemd-run")); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	return g, nil
}

// linkCheckout makes dir a checkout of repo made of symbolic links to its
// top-level files and directories (but .git, dist and pki).
func linkCheckout(repo, dir string) error {
	ents, err := os.ReadDir(repo)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	for _, e := range ents {
		if slices.Contains([]string{".git", "dist", "pki"}, e.Name()) {
			continue
		}
		if err := os.Symlink(filepath.Join(repo, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	return nil
}

// hostPrologue makes a host's mount namespace (see Guide) from its
// directory $R, then runs the block in $BLOCK in /tmp/spillway.
const hostPrologue = `set -e
for d in etc usr root var; do
  mkdir -p "$R/$d.u" "$R/$d.w"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$R/$d.u,workdir=$R/$d.w" "/$d"
done
mount --bind "$R/tmp" /tmp
cd /tmp/spillway
exec sh -e -c "$BLOCK"
`

// Exec runs script with sh -e as root on host (a guide host or admin) and
// returns its combined output; the error quotes it.
func (g *Guide) Exec(ctx context.Context, host, script string) (string, error) {
	h := g.Lab.Host(host)
	if h == nil {
		return "", fmt.Errorf("lab: no host %q", host)
	}
	var cmd *exec.Cmd
	env := append(os.Environ(), "PATH="+g.path, "BLOCK="+script)
	if host == "admin" {
		cmd = exec.CommandContext(ctx, "ip", "netns", "exec", h.NS, "sh", "-e", "-c", script)
		cmd.Dir = g.Work
	} else {
		cmd = exec.CommandContext(ctx, "ip", "netns", "exec", h.NS, "sh", "-c", hostPrologue)
		env = append(env, "R="+filepath.Join(g.fs, host))
	}
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("lab: on %s: %w\n%s", host, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Run runs block b: a host block on each of its hosts in turn, the copy
// step as the lab does it (every admin:dist/HOST/ to HOST's
// /tmp/spillway/). It returns each host's output and the first error.
func (g *Guide) Run(ctx context.Context, b GuideBlock) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case b.Comment == guideCopy:
		for _, h := range g.Hosts {
			src := filepath.Join(g.Work, "dist", h)
			if _, err := os.Stat(src); err != nil {
				return out, fmt.Errorf("lab: copy step: admin staged nothing for %s: %w", h, err)
			}
			if o, err := exec.CommandContext(ctx, "cp", "-a", src+"/.", filepath.Join(g.fs, h, "tmp", "spillway")).CombinedOutput(); err != nil {
				return out, fmt.Errorf("lab: copy to %s: %w: %s", h, err, o)
			}
		}
		return out, nil
	case len(b.Hosts()) > 0:
		for _, h := range b.Hosts() {
			o, err := g.Exec(ctx, h, b.Body)
			out[h] = o
			if err != nil {
				return out, fmt.Errorf("guide line %d: %w", b.Line, err)
			}
		}
		return out, nil
	}
	return out, fmt.Errorf("lab: guide line %d: a block the lab cannot place (comment %q; want a host list or %q)", b.Line, b.Comment, guideCopy)
}
