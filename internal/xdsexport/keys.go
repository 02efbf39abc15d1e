package xdsexport

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// View is what one snapshot serves: the clients of Kind at Site that may
// see Services. Every client of the same View shares one snapshot.
type View struct {
	Kind Kind
	// Site is the clients' site ("" for the aggregate weights).
	Site string
	// Services are the services the clients see, sorted; empty: every
	// service.
	Services []string
}

// Key returns v's snapshot-cache key: Key(Kind, Site) when v sees every
// service, and "KIND+SERVICE,SERVICE.../SITE" otherwise. Service names
// hold no '/', '+' or ',' (ParseGrant), and kinds no '+', so two Views
// never share a key whatever their sites.
func (v View) Key() string {
	if len(v.Services) == 0 {
		return Key(v.Kind, v.Site)
	}
	return string(v.Kind) + "+" + strings.Join(v.Services, ",") + "/" + v.Site
}

// Key is the snapshot-cache key of the clients of kind at site that see
// every service.
func Key(kind Kind, site string) string { return string(kind) + "/" + site }

// keyState is one View that clients' streams use.
type keyState struct {
	view    View
	streams int       // open streams on it
	idle    time.Time // since when streams is 0
}

// errKeys is keyTable.acquire's refusal.
var errKeys = errors.New("xdsexport: too many distinct xDS snapshots in use")

// keyTable is the Views clients' streams use, with the limit on how many
// there are (Limits.MaxKeys) and how long one without a stream is kept
// (Limits.KeyGrace). Not safe for concurrent use: the Server guards it
// with its mutex.
type keyTable struct {
	max   int
	grace time.Duration
	by    map[string]*keyState
}

func newKeyTable(l Limits) *keyTable {
	return &keyTable{max: l.MaxKeys, grace: l.KeyGrace, by: map[string]*keyState{}}
}

// acquire counts one more stream on v at now. A View new to the table
// takes a free place, or the place of the View idle longest (returned as
// evicted, for the cache to drop); with every place taken by Views with
// streams, it is refused (errKeys). fresh reports whether v is new.
func (t *keyTable) acquire(v View, now time.Time) (fresh bool, evicted string, err error) {
	k := v.Key()
	if s, ok := t.by[k]; ok {
		s.streams++
		return false, "", nil
	}
	if len(t.by) >= t.max {
		var oldest *keyState
		for _, s := range t.by {
			if s.streams == 0 && (oldest == nil || s.idle.Before(oldest.idle) || (s.idle.Equal(oldest.idle) && s.view.Key() < oldest.view.Key())) {
				oldest = s
			}
		}
		if oldest == nil {
			return false, "", fmt.Errorf("%w: %d, every one with a stream", errKeys, len(t.by))
		}
		evicted = oldest.view.Key()
		delete(t.by, evicted)
	}
	t.by[k] = &keyState{view: v, streams: 1}
	return true, evicted, nil
}

// release counts one stream fewer on key at now.
func (t *keyTable) release(key string, now time.Time) {
	s, ok := t.by[key]
	if !ok {
		return
	}
	if s.streams--; s.streams <= 0 {
		s.streams, s.idle = 0, now
	}
}

// expire drops the Views without a stream for longer than the grace
// period at now and returns their keys, sorted.
func (t *keyTable) expire(now time.Time) []string {
	var out []string
	for k, s := range t.by {
		if s.streams == 0 && now.Sub(s.idle) > t.grace {
			delete(t.by, k)
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// has reports whether key is in the table.
func (t *keyTable) has(key string) bool {
	_, ok := t.by[key]
	return ok
}

// views returns the Views in the table.
func (t *keyTable) views() []View {
	out := make([]View, 0, len(t.by))
	for _, s := range t.by {
		out = append(out, s.view)
	}
	return out
}
