package loadaware

import (
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

// Registry keeps one Endpoint per Backend across snapshots and decides
// which ones slow-start: what the goroutine that builds routing tables
// holds next to its Backends. Each build calls Sync with the backends it
// may send to now (healthy, not ejected) and then Endpoint for each. An
// Endpoint first seen at the first Sync is established (no slow start:
// the gfe is starting, not the instance); one first seen later, or seen
// again after at least one Sync without it, begins its slow-start window
// at that Sync's now (Endpoint.Restart), as Envoy and HAProxy slow-start
// a host that is new or returns to health. A Registry is not safe for
// concurrent use (the builder's goroutine owns it); the Endpoints it
// returns are.
type Registry struct {
	// Guarded by the owner's goroutine.
	entries map[*backend.Backend]*registryEntry
	syncs   uint64
}

type registryEntry struct {
	e *Endpoint
	// seen is the number of the last Sync that listed the backend.
	seen uint64
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{entries: map[*backend.Backend]*registryEntry{}}
}

// Sync records that bs are the backends that may be sent to at now (nil
// entries are ignored): new ones get an Endpoint, returning ones restart
// their slow-start window, and Endpoints of backends not in bs are kept,
// to be restarted if they return. It allocates only for new backends.
func (r *Registry) Sync(bs []*backend.Backend, now time.Time) {
	r.syncs++
	for _, b := range bs {
		if b == nil {
			continue
		}
		ent, ok := r.entries[b]
		switch {
		case !ok:
			var start time.Time
			if r.syncs > 1 {
				start = now
			}
			ent = &registryEntry{e: NewEndpoint(b, start)}
			r.entries[b] = ent
		case ent.seen < r.syncs-1:
			ent.e.Restart(now) // absent from the previous Sync: it returns
		}
		ent.seen = r.syncs
	}
}

// Endpoint returns b's Endpoint, nil when no Sync has listed b.
func (r *Registry) Endpoint(b *backend.Backend) *Endpoint {
	if ent, ok := r.entries[b]; ok {
		return ent.e
	}
	return nil
}

// Forget drops b's Endpoint (the backend left the configuration): if it
// is listed again, it is new.
func (r *Registry) Forget(b *backend.Backend) { delete(r.entries, b) }

// Len returns the number of Endpoints the Registry keeps.
func (r *Registry) Len() int { return len(r.entries) }
