// Package daemonflags turns the command-line values the Spillway daemons
// (gfe, controlplane) share into their typed configuration, so both read
// the same flags the same way.
package daemonflags

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/spf13/pflag"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
)

// List splits a comma-separated flag value, dropping blanks and spaces.
func List(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// GossipKeyEnv is the environment variable a daemon reads its gossip key
// (or keyring: keys separated by commas or newlines, the primary first)
// from when --gossip-key-file is not set.
const GossipKeyEnv = "SPILLWAY_GOSSIP_KEY"

// AddGossipFlags defines on fs the gossip flags both daemons share:
// --gossip-addr, --join, --gossip-key-file, --gossip-key (discouraged:
// command lines are visible to every local user), --gossip-insecure,
// --gossip-ca and --gossip-accept-unsealed (seals, see mtls.GossipSeals),
// and --gossip-profile (gossip.Config.WithProfile).
func AddGossipFlags(fs *pflag.FlagSet, defaultAddr string) {
	fs.String("gossip-profile", gossip.ProfileLAN, "gossip timings for the cluster's size: "+gossip.ProfileLAN+" (up to a "+
		"couple of hundred members) or "+gossip.ProfileLarge+" (hundreds to thousands: rarer full-state syncs and "+
		"seal refreshes, a 15m seal max age; docs/design.md §5, BENCHMARKS.md §8); every member should use the same")
	fs.String("gossip-addr", defaultAddr, "gossip bind address (UDP and TCP); port 0 picks one. "+
		"Beyond loopback a key is required (or --gossip-insecure)")
	fs.String("join", "", "comma-separated gossip seeds (host:port)")
	fs.String("gossip-key-file", "", "file with the gossip keyring: one base64 AES key (16, 24 or 32 bytes) per line, "+
		"the first encrypts, all decrypt; re-read on SIGHUP (key rotation). Or set "+GossipKeyEnv)
	fs.String("gossip-key", "", "base64 gossip key on the command line: DISCOURAGED, visible in ps and /proc; "+
		"use --gossip-key-file or "+GossipKeyEnv)
	fs.Bool("gossip-insecure", false, "allow unencrypted, unauthenticated gossip on a non-loopback address (anyone "+
		"who reaches the port can join and publish state)")
	fs.String("gossip-ca", "", "PEM bundle of the CAs whose certificates may seal gossip states (default --tls-ca): "+
		"a state is believed only if sealed by a certificate that names its node")
	fs.Bool("gossip-accept-unsealed", false, "also believe gossip states without a seal, counted and logged: only while "+
		"members of a version that does not seal remain (rolling upgrade)")
}

// GossipSettings are the gossip flag values of a daemon.
type GossipSettings struct {
	// Name is the node's gossip name.
	Name string
	// Addr is --gossip-addr ("host:port"); Join is --join.
	Addr, Join string
	// KeyFile is --gossip-key-file: a keyring file (see ReadKeyring).
	KeyFile string
	// Key is --gossip-key (base64). KeyOnCommandLine says it came from the
	// command line (OnCommandLine), which Gossip warns about.
	Key              string
	KeyOnCommandLine bool
	// Insecure is --gossip-insecure (gossip.Config.Insecure).
	Insecure bool
	// AcceptUnsealed is --gossip-accept-unsealed
	// (gossip.Config.AcceptUnsealed).
	AcceptUnsealed bool
	// Profile is --gossip-profile (gossip.Config.WithProfile); empty
	// means gossip.ProfileLAN.
	Profile string
	// Getenv reads GossipKeyEnv; nil means os.Getenv.
	Getenv func(string) string
}

// Gossip returns the gossip configuration the settings describe, and
// warnings for the daemon to log. The key comes from exactly one of
// --gossip-key-file, GossipKeyEnv or --gossip-key (two of them set is an
// error, as is none on a non-loopback address without --gossip-insecure,
// which gossip.Config.Validate reports). Node states list per-group data
// that outgrows one Ethernet frame with many groups, so the UDP packet size
// is raised to 8192 bytes, which loopback and LANs carry.
func Gossip(s GossipSettings) (gossip.Config, []string, error) {
	c := gossip.DefaultConfig()
	host, p, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return c, nil, fmt.Errorf("--gossip-addr: %w", err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return c, nil, fmt.Errorf("--gossip-addr: port %q: %w", p, err)
	}
	c.Name, c.BindAddr, c.BindPort = s.Name, host, port
	c.Seeds = List(s.Join)
	c.UDPBufferSize = 8192
	c.Insecure = s.Insecure
	c.AcceptUnsealed = s.AcceptUnsealed
	if c, err = c.WithProfile(s.Profile); err != nil {
		return c, nil, fmt.Errorf("--gossip-profile: %w", err)
	}

	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	env := getenv(GossipKeyEnv)
	var sources []string
	for _, src := range []struct{ name, val string }{
		{"--gossip-key-file", s.KeyFile}, {GossipKeyEnv, env}, {"--gossip-key", s.Key},
	} {
		if src.val != "" {
			sources = append(sources, src.name)
		}
	}
	if len(sources) > 1 {
		return c, nil, fmt.Errorf("gossip key given by %s: set only one", strings.Join(sources, " and "))
	}
	var warnings []string
	switch {
	case s.KeyFile != "":
		keys, warn, err := ReadKeyring(s.KeyFile)
		if err != nil {
			return c, nil, err
		}
		c.Keys = keys
		warnings = append(warnings, warn...)
	case env != "":
		c.Keys = splitKeys(env)
		if len(c.Keys) == 0 {
			return c, nil, fmt.Errorf("%s: no key in it", GossipKeyEnv)
		}
	case s.Key != "":
		c.SecretKey = s.Key
		if s.KeyOnCommandLine {
			warnings = append(warnings, "--gossip-key puts the gossip key on the command line, where every local user "+
				"can read it (ps, /proc/PID/cmdline); use --gossip-key-file or "+GossipKeyEnv)
		}
	}
	if c.SecretKey == "" && len(c.Keys) == 0 && s.Insecure && !gossip.IsLoopback(host) {
		warnings = append(warnings, "--gossip-insecure: gossip on "+s.Addr+" is neither encrypted nor authenticated")
	}
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	return c, warnings, nil
}

// splitKeys splits a keyring given as one string: keys separated by
// commas, spaces or newlines.
func splitKeys(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' || r == ' ' || r == '\t' })
}

// ReadKeyring reads a gossip keyring file: one base64 key per line, the
// first the primary (it encrypts what the node sends; every key decrypts),
// blank lines and lines starting with # ignored. It checks every key and
// returns an error naming the file and line (never the key). warnings
// lists what the daemon should log: a file that other users may read.
func ReadKeyring(path string) (keys, warnings []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if _, err := gossip.DecodeKey(t); err != nil {
			errs = append(errs, fmt.Errorf("--gossip-key-file %s: line %d: %w", path, line, err))
			continue
		}
		keys = append(keys, t)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("--gossip-key-file %s: %w", path, err))
	}
	if len(errs) == 0 && len(keys) == 0 {
		errs = append(errs, fmt.Errorf("--gossip-key-file %s: no key in it", path))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warnings = append(warnings, fmt.Sprintf("--gossip-key-file %s: mode %v lets other users read the key; chmod 600 it", path, fi.Mode().Perm()))
	}
	return keys, warnings, nil
}

// KeyReloader is what ReloadGossipKeys changes: a running gossip node.
type KeyReloader interface {
	SetKeys(keys []string) error
	PrimaryKeyID() string
}

// ReloadGossipKeys re-reads the keyring file at path and installs it in n
// (gossip.Node.SetKeys): the daemons call it on SIGHUP, which is how a key
// is rotated without downtime. A bad file changes nothing. It returns the
// primary key's ID (gossip.KeyID) and the file's warnings.
func ReloadGossipKeys(n KeyReloader, path string) (primary string, warnings []string, err error) {
	keys, warnings, err := ReadKeyring(path)
	if err != nil {
		return "", nil, err
	}
	if err := n.SetKeys(keys); err != nil {
		return "", nil, fmt.Errorf("--gossip-key-file %s: %w", path, err)
	}
	return n.PrimaryKeyID(), warnings, nil
}

// OnCommandLine reports whether args set the flag --name (as "--name",
// "--name=..." or "-name...").
func OnCommandLine(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// ServerTLS returns the control plane's transport security from its flags:
// --tls-ca, --tls-cert, --tls-key, --tls-allowed-clients (comma-separated)
// and --insecure-plaintext. The result is validated by its user.
func ServerTLS(ca, cert, key, allowed string, plaintext bool) mtls.ServerConfig {
	return mtls.ServerConfig{
		Files:             mtls.Files{CA: ca, Cert: cert, Key: key},
		AllowedClients:    List(allowed),
		InsecurePlaintext: plaintext,
	}
}

// ClientTLS returns a control-plane client's transport security from its
// flags: --tls-ca, --tls-cert, --tls-key, --tls-server-name and
// --insecure-plaintext. The result is validated by its user.
func ClientTLS(ca, cert, key, serverName string, plaintext bool) mtls.ClientConfig {
	return mtls.ClientConfig{
		Files:             mtls.Files{CA: ca, Cert: cert, Key: key},
		ServerName:        serverName,
		InsecurePlaintext: plaintext,
	}
}

// OnHangup calls reload on every SIGHUP until ctx is done; it returns nil
// then. reload runs on OnHangup's goroutine, one call at a time.
func OnHangup(ctx context.Context, reload func()) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			reload()
		}
	}
}

// ReloadGossipKeyFile is ReloadGossipKeys for a SIGHUP: it logs the
// outcome (the new primary key's id, the file's warnings, or why the
// current keys stay) instead of returning it. Without a key file (path
// "") it only says so.
func ReloadGossipKeyFile(n KeyReloader, path string, log zerolog.Logger) {
	if path == "" {
		log.Info().Msg("SIGHUP: no --gossip-key-file to reload")
		return
	}
	id, warnings, err := ReloadGossipKeys(n, path)
	if err != nil {
		log.Error().Err(err).Msg("SIGHUP: gossip keyring not reloaded; the current keys stay")
		return
	}
	for _, w := range warnings {
		log.Warn().Msg(w)
	}
	log.Info().Str("primary_key", id).Msg("SIGHUP: gossip keyring reloaded")
}
