package lease

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/lb/hashing"
)

// View is what a Medium shows of the replicas at an instant.
type View struct {
	// Members are the alive replicas that may hold leases, self included,
	// sorted and unique.
	Members []string
	// Claims maps each member other than self to the leases it claims
	// (lease name → term). A member that claims nothing may be missing.
	Claims map[string]map[string]uint64
	// Versions maps each member other than self to the version of the
	// state its claims come from; a member renews all its claims by
	// showing a higher version (gossip.NodeState.Version).
	Versions map[string]uint64
}

// sighting is the newest claim on one lease by another replica that this
// replica has seen.
type sighting struct {
	holder string
	term   uint64
	// renewed is when, on this replica's clock, the holder last showed a
	// newer version while claiming the lease.
	renewed time.Time
}

// table is the pure part of an Elector: which leases this replica holds,
// what it remembers of the others' claims, and the rules that move leases
// (see the package doc). It does no I/O and reads no clock: now is an
// argument. Not safe for concurrent use (the Elector serializes it).
type table struct {
	self    string
	ttl     time.Duration
	settle  time.Duration // how long a claim is pending before it is held
	started time.Time     // when this replica started watching
	// claims maps the leases this replica claims to its claim on each:
	// pending, then held (see rule 4 of the package doc).
	claims map[string]*claim
	// seen maps a lease to the newest claim of another replica on it, kept
	// after that replica leaves the view until the claim lapses.
	seen map[string]sighting
	// terms maps a lease to the highest term seen for it, so that a new
	// holder's term is higher than every earlier one.
	terms map[string]uint64
	// versions and versionAt are, per other member, the newest state
	// version seen and when it was first seen (this replica's clock).
	versions  map[string]uint64
	versionAt map[string]time.Time
}

// claim is this replica's claim on one lease.
type claim struct {
	term uint64
	// since is when the claim was made; it is held from since+settle on.
	since time.Time
	held  bool
}

func newTable(self string, ttl, settle time.Duration, started time.Time) *table {
	return &table{
		self: self, ttl: ttl, settle: settle, started: started,
		claims: map[string]*claim{}, seen: map[string]sighting{}, terms: map[string]uint64{},
		versions: map[string]uint64{}, versionAt: map[string]time.Time{},
	}
}

// MaxTerm is the highest term a claim may carry to count. Terms grow by
// one per change of holder, so a real one never comes near it (a change
// every second for eight million years); a claim above it is a bug or a
// forgery, and believing it would make every later term overflow.
const MaxTerm = 1 << 48

// Implausible is a claim observe ignored: its term is above MaxTerm.
type Implausible struct {
	Member, Lease string
	Term          uint64
}

// observe takes in a view at now: it notes which members renewed (showed
// a newer version), what they claim, and which claims were dropped. It
// returns the claims it ignored (Implausible), sorted.
func (t *table) observe(v View, now time.Time) (ignored []Implausible) {
	for m, ver := range v.Versions {
		if m == t.self {
			continue
		}
		if ver > t.versions[m] {
			t.versions[m], t.versionAt[m] = ver, now
		}
	}
	for m, claims := range v.Claims {
		if m == t.self {
			continue
		}
		renewed := t.versionAt[m]
		for name, term := range claims {
			if term > MaxTerm {
				ignored = append(ignored, Implausible{Member: m, Lease: name, Term: term})
				continue
			}
			t.terms[name] = max(t.terms[name], term)
			s, ok := t.seen[name]
			// The newest claim wins: a higher term, or the same holder's
			// renewal.
			if !ok || term > s.term || (term == s.term && m == s.holder) {
				t.seen[name] = sighting{holder: m, term: term, renewed: renewed}
			}
		}
	}
	// A member still in the view whose state no longer claims a lease has
	// released it: the claim is over at once. One that left the view may
	// still be acting (a partition, a pause): its claim runs until it
	// lapses.
	alive := map[string]bool{}
	for _, m := range v.Members {
		alive[m] = true
	}
	for name, s := range t.seen {
		if term, claims := v.Claims[s.holder][name]; alive[s.holder] && (!claims || term > MaxTerm) {
			delete(t.seen, name)
		}
	}
	slices.SortFunc(ignored, func(a, b Implausible) int {
		return strings.Compare(a.Member+"\x00"+a.Lease, b.Member+"\x00"+b.Lease)
	})
	return ignored
}

// decide applies the rules to every lease in names at now, given the
// alive members, and returns what changed: leases that became held (with
// their terms) and leases released (claims dropped, held or pending).
// Leases not in names are released.
func (t *table) decide(names, members []string, now time.Time) (acquired map[string]uint64, released []string, err error) {
	var owner func(string) string
	if len(members) > 0 {
		tbl, err := hashing.NewMaglev(hashing.DefaultConfig(), members)
		if err != nil {
			return nil, nil, fmt.Errorf("lease: candidates over %v: %w", members, err)
		}
		owner = func(name string) string { n, _ := tbl.PickName(hashing.String(name)); return n }
	} else {
		owner = func(string) string { return "" }
	}
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(t.claims)) {
		c := t.claims[name]
		s, other := t.seen[name]
		switch {
		case !want[name]:
		case owner(name) != t.self:
		case other && t.live(s, now) && (s.term > c.term || (s.term == c.term && s.holder > t.self)):
			// Two claims (a healed partition, or two pending claims):
			// the higher term stays.
		default:
			if !c.held && !now.Before(c.since.Add(t.settle)) {
				c.held = true
				if acquired == nil {
					acquired = map[string]uint64{}
				}
				acquired[name] = c.term
			}
			continue
		}
		delete(t.claims, name)
		released = append(released, name)
	}
	for _, name := range names {
		if _, ok := t.claims[name]; ok || owner(name) != t.self {
			continue
		}
		if now.Before(t.started.Add(t.ttl)) {
			continue // a replica that just started may not have seen the holder yet
		}
		if s, ok := t.seen[name]; ok && t.live(s, now) {
			continue
		}
		term := t.terms[name] + 1
		t.terms[name] = term
		t.claims[name] = &claim{term: term, since: now}
	}
	return acquired, released, nil
}

// claimed returns every claim (lease → term), pending or held: what this
// replica publishes.
func (t *table) claimed() map[string]uint64 {
	out := make(map[string]uint64, len(t.claims))
	for name, c := range t.claims {
		out[name] = c.term
	}
	return out
}

// held returns the leases held (lease → term).
func (t *table) held() map[string]uint64 {
	out := map[string]uint64{}
	for name, c := range t.claims {
		if c.held {
			out[name] = c.term
		}
	}
	return out
}

// live reports whether a claim seen runs at now: its holder renewed it
// less than ttl ago.
func (t *table) live(s sighting, now time.Time) bool {
	return now.Before(s.renewed.Add(t.ttl))
}
