package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/clock"
)

// LoadedConfig is one accepted operator configuration with its version. It
// is immutable: a reload makes a new one.
type LoadedConfig struct {
	// Config is the parsed, validated configuration (read-only).
	Config *config.Config
	// YAML is Config in canonical form (config.Marshal): the effective
	// configuration after SPILLWAY_* overrides and defaults, which is what
	// snapshots carry, so every gfe parses exactly what this replica
	// validated. Read-only.
	YAML []byte
	// RedactedYAML is YAML with every secret replaced by
	// config.RedactedSecret (config.Redact): what is served to a client
	// that is not authenticated by mutual TLS. It shares YAML's bytes when
	// the configuration holds no secret. Read-only.
	RedactedYAML []byte
	// Source is the file the configuration was loaded from.
	Source string
	// Hash is the first 12 hex digits of the SHA-256 of YAML. Two replicas
	// with the same effective configuration have the same Hash; it is the
	// ConfigVersion they gossip.
	Hash string
	// Seq is 1 for the first configuration this replica accepted and grows
	// by one with each accepted change.
	Seq uint64
	// Version is "<Seq>-<Hash>", the version shown in logs, metrics and
	// /status.
	Version string
	// LoadedAt is when the configuration was accepted (Options.Clock).
	LoadedAt time.Time
}

// applier is a component that takes every new configuration, in the order
// of the reloader's list (Prometheus's reloaders). An error rejects the
// configuration.
type applier struct {
	name string
	fn   func(*LoadedConfig) error
}

// reloader loads the configuration file, versions it, hands each accepted
// configuration to the appliers, and, while Run runs, reloads on change.
//
// Guarantees:
//   - Current never returns a configuration that failed to load, failed
//     validation or was refused by an applier: the last good one stays.
//   - A new version is made only when the effective configuration (its
//     canonical YAML) changes; rewriting a file with the same content, or
//     editing only comments, changes nothing.
//   - Identical file content is processed once: a rejected file is counted
//     and logged once, not at every event or poll, until it changes.
//
// All methods are safe for concurrent use; reloads are serialised.
type reloader struct {
	// Immutable after newReloader.
	path     string
	debounce time.Duration
	poll     time.Duration
	appliers []applier
	clock    clock.Clock
	log      zerolog.Logger
	m        *metrics

	mu sync.Mutex
	// Guarded by mu.
	lastRaw []byte // file content of the last attempt, accepted or not

	// Accessed atomically.
	cur atomic.Pointer[LoadedConfig]

	watching chan struct{} // closed once Run watches the directory
}

func newReloader(path string, debounce, poll time.Duration, appliers []applier, clk clock.Clock, log zerolog.Logger, m *metrics) *reloader {
	return &reloader{
		path:     path,
		debounce: debounce,
		poll:     poll,
		appliers: appliers,
		clock:    clock.OrReal(clk),
		log:      log.With().Str("component", "config").Str("cfg_path", path).Logger(),
		m:        m,
		watching: make(chan struct{}),
	}
}

// Watching returns a channel that is closed once Run watches the file's
// directory: changes made after that are seen.
func (r *reloader) Watching() <-chan struct{} { return r.watching }

// Current returns the configuration being served, or nil before the first
// successful Reload.
func (r *reloader) Current() *LoadedConfig { return r.cur.Load() }

// Reload reads the file and, if its effective configuration changed,
// validates it, applies it and makes it current. It returns changed = true
// when a new version was accepted, and an error (with every problem, each a
// *config.FieldError naming the file and field path, for invalid content)
// when the file was rejected; the previous configuration then stays
// current. Rejections are counted in the reload metrics; logging is the
// caller's (see logReload).
func (r *reloader) Reload() (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw, err := os.ReadFile(r.path)
	if err != nil {
		return false, r.failLocked(nil, fmt.Errorf("read config %s: %w", r.path, err))
	}
	if r.lastRaw != nil && bytes.Equal(raw, r.lastRaw) {
		return false, nil
	}
	r.lastRaw = raw
	cfg, err := config.Load(r.path)
	if err != nil {
		return false, r.failLocked(raw, err)
	}
	canon, redacted, hash, err := canonicalForms(cfg)
	if err != nil {
		return false, r.failLocked(raw, err)
	}
	prev := r.cur.Load()
	if prev != nil && prev.Hash == hash {
		r.m.lastReloadOK.Set(1)
		return false, nil
	}
	var seq uint64 = 1
	if prev != nil {
		seq = prev.Seq + 1
	}
	next := &LoadedConfig{
		Config:       cfg,
		YAML:         canon,
		RedactedYAML: redacted,
		Source:       r.path,
		Hash:         hash,
		Seq:          seq,
		Version:      fmt.Sprintf("%d-%s", seq, hash),
		LoadedAt:     r.clock.Now(),
	}
	// Apply in the list's order; see Daemon for why that order.
	for _, a := range r.appliers {
		start := time.Now()
		if err := a.fn(next); err != nil {
			return false, r.failLocked(raw, fmt.Errorf("apply config to %s: %w", a.name, err))
		}
		r.log.Debug().Str("applier", a.name).Dur("took", time.Since(start)).Msg("config applied")
	}
	r.cur.Store(next)
	r.m.reloads.WithLabelValues(resultSuccess).Inc()
	r.m.lastReloadOK.Set(1)
	r.m.configInfo.Reset()
	r.m.configInfo.WithLabelValues(next.Version).Set(1)
	r.log.Info().Str("version", next.Version).Msg("config accepted")
	return true, nil
}

// ReloadAll is Reload without the shortcut for unchanged file content: it
// also re-reads files the configuration names (cookie_secret_file), whose
// changes leave the configuration file itself as it was. A new version is
// still made only if the effective configuration changed.
func (r *reloader) ReloadAll() (changed bool, err error) {
	r.mu.Lock()
	r.lastRaw = nil
	r.mu.Unlock()
	return r.Reload()
}

// failLocked counts a rejected load and returns err. raw is the rejected
// content (nil when the file could not be read, so that a later read of the
// same content is retried). Caller must hold r.mu.
func (r *reloader) failLocked(raw []byte, err error) error {
	if raw == nil {
		r.lastRaw = nil
	}
	r.m.reloads.WithLabelValues(resultFailure).Inc()
	r.m.lastReloadOK.Set(0)
	return err
}

// logReload logs the outcome of a Reload: every problem of a rejected
// configuration on its own line with its field path, then a summary naming
// the version that stays in service.
func (r *reloader) logReload(changed bool, err error) {
	if err == nil {
		return
	}
	keep := "none"
	if cur := r.Current(); cur != nil {
		keep = cur.Version
	}
	fes := config.FieldErrors(err)
	for _, fe := range fes {
		r.log.Error().Str("file", fe.File).Str("field", fe.Path).Str("problem", fe.Msg).Msg("config problem")
	}
	ev := r.log.Error().Int("problems", len(fes)).Str("serving_version", keep)
	if len(fes) == 0 || !errors.Is(err, config.ErrInvalid) {
		ev = ev.Err(err)
	}
	ev.Msg("config rejected; keeping the last good config")
}

// Run watches the configuration file's directory (so that editors and
// tools that replace the file by renaming a new one over it, or swap a
// symlink as Kubernetes ConfigMaps do, are seen) and reloads ReloadDebounce
// after the last event, and every ReloadPoll. It returns nil when ctx is
// done, or an error if the directory cannot be watched.
func (r *reloader) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(r.path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch config directory %s: %w", dir, err)
	}
	close(r.watching)
	debounce := r.clock.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var poll <-chan time.Time
	if r.poll > 0 {
		t := r.clock.NewTicker(r.poll)
		defer t.Stop()
		poll = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("watch config: watcher closed")
			}
			if ev.Op == fsnotify.Chmod {
				continue // touch, chmod: content unchanged
			}
			// Any other event in the directory may be ours (a rename
			// over the file, a symlink swap); re-reading is cheap and
			// deduplicated by content.
			debounce.Reset(r.debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watch config: watcher closed")
			}
			r.log.Warn().Err(err).Msg("config watcher error")
		case <-debounce.C():
			r.logReload(r.Reload())
		case <-poll:
			r.logReload(r.Reload())
		}
	}
}

// canonicalForms returns what a LoadedConfig serves of cfg: its canonical
// YAML (config.Marshal), that YAML with the secrets redacted, and its Hash.
func canonicalForms(cfg *config.Config) (canon, redacted []byte, hash string, err error) {
	if canon, err = config.Marshal(cfg); err != nil {
		return nil, nil, "", err
	}
	if redacted, err = redactedYAML(cfg, canon, config.Marshal); err != nil {
		return nil, nil, "", err
	}
	return canon, redacted, configHash(canon), nil
}

// configHash is the Hash of a configuration's YAML form: the first 12 hex
// digits of its SHA-256.
func configHash(yaml []byte) string {
	sum := sha256.Sum256(yaml)
	return hex.EncodeToString(sum[:])[:12]
}

// redactedYAML returns what marshal makes of cfg with its secrets
// redacted, or plain (marshal's form of cfg itself) when redacting changes
// nothing, so that a configuration without secrets is held once.
func redactedYAML(cfg *config.Config, plain []byte, marshal func(*config.Config) ([]byte, error)) ([]byte, error) {
	red, err := marshal(config.Redact(cfg))
	if err != nil {
		return nil, err
	}
	if bytes.Equal(red, plain) {
		return plain, nil
	}
	return red, nil
}
