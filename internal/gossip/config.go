package gossip

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config is what an operator sets for gossip. Start from DefaultConfig; the
// zero value is not valid. The mapstructure tags are the keys under the
// daemon's gossip section; Validate names fields as gossip.<key>.
//
// The defaults are tuned for a LAN or loopback (memberlist's
// DefaultLocalConfig, with faster failure detection). With them:
//   - a published state reaches every node of a 50-node loopback cluster
//     within tens of milliseconds (see TestPropagation50);
//   - a crashed node is declared dead about 2.5 s after it stops answering
//     (SuspicionMult · max(1, log10 N) · ProbeInterval, plus the probe and a
//     confirmation from a second node).
//
// For a WAN, raise ProbeInterval, ProbeTimeout, GossipInterval, TCPTimeout and
// PushPullInterval (memberlist's DefaultWANConfig: 5s, 3s, 500ms, 30s, 60s).
type Config struct {
	// Name is this node's memberlist name, unique in the cluster. Required.
	// A node that restarts under the same name (and address) takes its place.
	Name string `mapstructure:"name"`

	// BindAddr is the address the UDP and TCP gossip listeners bind.
	// Default "127.0.0.1"; set "0.0.0.0" or a host address for a
	// multi-host cluster, which requires a key (or Insecure).
	BindAddr string `mapstructure:"bind_addr"`
	// BindPort is the UDP and TCP port. Default 7946. 0 picks a free port
	// (read it back with Node.Addr), which is what tests use.
	BindPort int `mapstructure:"bind_port"`
	// AdvertiseAddr is the address other nodes use to reach this one. Empty
	// means BindAddr, or, when BindAddr is 0.0.0.0, the host's private IP.
	AdvertiseAddr string `mapstructure:"advertise_addr"`
	// AdvertisePort is the port other nodes use. 0 means the bound port.
	AdvertisePort int `mapstructure:"advertise_port"`

	// Seeds are "host:port" addresses of nodes to join at start (any one
	// answering is enough). Empty starts a new cluster. Listing this node
	// itself is harmless, so every node may share one list.
	Seeds []string `mapstructure:"seeds"`

	// SecretKey, when not empty, is the base64 (standard encoding) of a 16,
	// 24 or 32-byte AES key (AES-128/192/256-GCM) that encrypts and
	// authenticates all gossip. Nodes with a different key, or none, cannot
	// join, and their packets are dropped. Default empty. Generate one with
	// `head -c 32 /dev/urandom | base64`. Set SecretKey or Keys, not both.
	SecretKey string `mapstructure:"secret_key"`
	// Keys is a keyring: base64 keys as SecretKey, the first of which is
	// the primary (it encrypts what this node sends) while every key
	// decrypts what it receives. Several keys let a cluster rotate its key
	// without downtime (Node.SetKeys; see docs/security-notes): install
	// the new key everywhere as a secondary, make it primary everywhere,
	// then remove the old one. Set SecretKey or Keys, not both.
	Keys []string `mapstructure:"keys"`
	// Insecure allows running without a key while BindAddr is not a
	// loopback address, where anyone who reaches the port can join the
	// cluster and publish any state (docs/design.md §9). Default false: such a
	// Config is invalid. A node bound to loopback may run without a key
	// either way (only local processes reach it). Run logs an error-level
	// warning when it runs unencrypted beyond loopback.
	Insecure bool `mapstructure:"insecure"`

	// GossipInterval is how often each node sends queued state broadcasts
	// to GossipNodes random members over UDP. Default 100ms. Lower spreads
	// states faster at the cost of more packets.
	GossipInterval time.Duration `mapstructure:"gossip_interval"`
	// GossipNodes is how many random members each gossip round goes to.
	// Default 3. Higher spreads faster (fan-out) at the cost of bandwidth.
	GossipNodes int `mapstructure:"gossip_nodes"`
	// RetransmitMult sets how many times each node gossips one membership
	// message (join, suspect, dead) it originates or relays:
	// RetransmitMult · ceil(log10(N+1)) times. Default 4 (memberlist LAN).
	// A member misses a given message with probability about
	// exp(-RetransmitMult · ceil(log10(N+1))) (3e-4 at 50 nodes); a missed
	// join is repaired once memberlist's gossip of it would have arrived
	// (about a second at a few members, 11 s at 1,000, at least a tenth of
	// PushPullInterval; see Node), anything else by the next push/pull. Higher costs a burst of packets whenever many
	// nodes start at once.
	RetransmitMult int `mapstructure:"retransmit_mult"`
	// StateRetransmitMult is the same for state messages: each node gossips
	// each state it publishes or relays StateRetransmitMult ·
	// ceil(log10(N+1)) times. Default 4. States also go straight from the
	// publisher to every member, so gossip only repairs lost packets and
	// unreachable paths; higher repairs more at the cost of bandwidth
	// (states are larger and frequent).
	StateRetransmitMult int `mapstructure:"state_retransmit_mult"`
	// PushPullInterval is how often a node syncs its full view (members and
	// every state) with one random member over TCP. Default 10s; memberlist
	// stretches it beyond 32 nodes (20s at 50). This is the last-resort
	// repair path. Cost is one TCP exchange of all states per node per
	// interval.
	PushPullInterval time.Duration `mapstructure:"push_pull_interval"`

	// ProbeInterval is how often each node probes one random member.
	// Default 500ms. Lower detects failures sooner at the cost of probes.
	ProbeInterval time.Duration `mapstructure:"probe_interval"`
	// ProbeTimeout is how long a probe waits for an ack before asking
	// others to probe indirectly. Default 200ms; must be below
	// ProbeInterval and above the worst RTT between nodes.
	ProbeTimeout time.Duration `mapstructure:"probe_timeout"`
	// SuspicionMult scales how long a suspected node may refute before it
	// is declared dead: SuspicionMult · max(1, log10 N) · ProbeInterval
	// (1.5s with the defaults up to 10 nodes), up to 6 times that without
	// confirmations from other nodes. Default 3. Lower detects sooner and
	// risks declaring a slow node dead.
	SuspicionMult int `mapstructure:"suspicion_mult"`
	// TCPTimeout bounds each TCP connection (push/pull, join). Default 1s.
	TCPTimeout time.Duration `mapstructure:"tcp_timeout"`
	// UDPBufferSize is the largest UDP packet sent, in bytes. Default 1400,
	// which fits a 1500-byte Ethernet MTU. A state larger than about
	// UDPBufferSize - 50 bytes (after compression) is sent to each member
	// over TCP instead, and not gossiped; raise it on loopback or
	// jumbo-frame networks (at most 65507).
	UDPBufferSize int `mapstructure:"udp_buffer_size"`

	// JoinBackoffMin and JoinBackoffMax bound the wait between attempts to
	// join Seeds at start: it doubles from Min to Max, with jitter
	// (uniform in [d/2, d]). Defaults 100ms and 5s.
	JoinBackoffMin time.Duration `mapstructure:"join_backoff_min"`
	JoinBackoffMax time.Duration `mapstructure:"join_backoff_max"`
	// RejoinInterval is how often, once joined, a node joins Seeds again,
	// which heals a partition after both sides declared each other dead
	// (memberlist itself stops contacting dead nodes). Each rejoin is one
	// push/pull per seed. Default 30s; 0 disables.
	RejoinInterval time.Duration `mapstructure:"rejoin_interval"`
	// LeaveTimeout bounds how long Run waits, on shutdown, for the leave
	// message to go out before closing the sockets. Default 1s. Other nodes
	// drop a node that left at once, and one that did not only after
	// failure detection.
	LeaveTimeout time.Duration `mapstructure:"leave_timeout"`
	// StateTTL is how long a node keeps, hidden, the last state of a
	// departed node (so its messages still in flight cannot bring an older
	// version back, and it reappears at once if it returns) and a state
	// that arrived before its publisher's alive message. Default 2m; it must
	// exceed the time a departed node's messages can still circulate
	// (failure detection plus PushPullInterval).
	StateTTL time.Duration `mapstructure:"state_ttl"`

	// AcceptUnsealed makes a node with a Verifier (Options.Verifier)
	// believe states without a seal too, counted and logged, so that
	// members of a version that does not seal keep counting during a
	// rolling upgrade. A node whose held state is sealed is never replaced
	// by an unsealed one. Default false: unsealed states are refused.
	AcceptUnsealed bool `mapstructure:"accept_unsealed"`
	// SealMaxAge is the oldest sealed state a node with a Verifier
	// believes: a state's Version is its publisher's clock (Unix
	// nanoseconds) at publish, and a sealed node re-publishes its state at
	// least every SealMaxAge/3, so an older one is a replay (or its
	// publisher's clock is behind by more than about 2/3 SealMaxAge).
	// Default 1m; at most StateTTL, so that a departed node's last state is
	// remembered for as long as a replay of it could be believed.
	SealMaxAge time.Duration `mapstructure:"seal_max_age"`
}

// DefaultConfig returns the defaults documented on each Config field. Name
// (and usually Seeds) must still be set.
func DefaultConfig() Config {
	return Config{
		BindAddr:            "127.0.0.1",
		BindPort:            7946,
		GossipInterval:      100 * time.Millisecond, // memberlist Local
		GossipNodes:         3,
		RetransmitMult:      4, // memberlist LAN
		StateRetransmitMult: 4,
		PushPullInterval:    10 * time.Second,       // Local: 15s; full state sync is our repair path
		ProbeInterval:       500 * time.Millisecond, // Local: 1s; halves failure detection
		ProbeTimeout:        200 * time.Millisecond, // memberlist Local
		SuspicionMult:       3,                      // memberlist Local
		TCPTimeout:          time.Second,            // memberlist Local
		UDPBufferSize:       1400,                   // memberlist LAN: fits a 1500-byte MTU
		JoinBackoffMin:      100 * time.Millisecond,
		JoinBackoffMax:      5 * time.Second,
		RejoinInterval:      30 * time.Second, // as serf's reconnect interval
		LeaveTimeout:        time.Second,
		StateTTL:            2 * time.Minute,
		SealMaxAge:          time.Minute,
	}
}

// Validate reports every invalid field at once, each error naming the field
// as gossip.<key> and the bad value.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if c.Name == "" {
		bad("gossip.name: required")
	}
	if c.BindAddr == "" {
		bad("gossip.bind_addr: required")
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		bad("gossip.bind_port: must be in [0, 65535], got %d", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		bad("gossip.advertise_port: must be in [0, 65535], got %d", c.AdvertisePort)
	}
	for i, s := range c.Seeds {
		if s == "" {
			bad("gossip.seeds[%d]: empty address", i)
		}
	}
	if keys, err := c.keys(); err != nil {
		errs = append(errs, err)
	} else if len(keys) == 0 && !c.Insecure && c.BindAddr != "" && !IsLoopback(c.BindAddr) {
		bad("gossip.secret_key: required when gossip.bind_addr (%q) is not a loopback address: "+
			"without a key anyone who reaches the port can join and publish states; "+
			"set a key (--gossip-key-file or SPILLWAY_GOSSIP_KEY) or, knowingly, gossip.insecure (--gossip-insecure)", c.BindAddr)
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad("gossip.%s: must be > 0, got %v", key, d)
		}
	}
	positive("gossip_interval", c.GossipInterval)
	positive("push_pull_interval", c.PushPullInterval)
	positive("probe_interval", c.ProbeInterval)
	positive("probe_timeout", c.ProbeTimeout)
	positive("tcp_timeout", c.TCPTimeout)
	positive("join_backoff_min", c.JoinBackoffMin)
	positive("state_ttl", c.StateTTL)
	if c.SealMaxAge <= 0 || (c.StateTTL > 0 && c.SealMaxAge > c.StateTTL) {
		bad("gossip.seal_max_age: must be in (0, state_ttl=%v], got %v", c.StateTTL, c.SealMaxAge)
	}
	if c.ProbeTimeout >= c.ProbeInterval && c.ProbeTimeout > 0 && c.ProbeInterval > 0 {
		bad("gossip.probe_timeout: must be < probe_interval (%v), got %v", c.ProbeInterval, c.ProbeTimeout)
	}
	if c.JoinBackoffMax < c.JoinBackoffMin {
		bad("gossip.join_backoff_max: must be >= join_backoff_min (%v), got %v", c.JoinBackoffMin, c.JoinBackoffMax)
	}
	if c.RejoinInterval < 0 {
		bad("gossip.rejoin_interval: must be >= 0, got %v", c.RejoinInterval)
	}
	if c.LeaveTimeout < 0 {
		bad("gossip.leave_timeout: must be >= 0, got %v", c.LeaveTimeout)
	}
	if c.GossipNodes < 1 {
		bad("gossip.gossip_nodes: must be >= 1, got %d", c.GossipNodes)
	}
	if c.RetransmitMult < 1 {
		bad("gossip.retransmit_mult: must be >= 1, got %d", c.RetransmitMult)
	}
	if c.StateRetransmitMult < 1 {
		bad("gossip.state_retransmit_mult: must be >= 1, got %d", c.StateRetransmitMult)
	}
	if c.SuspicionMult < 1 {
		bad("gossip.suspicion_mult: must be >= 1, got %d", c.SuspicionMult)
	}
	if c.UDPBufferSize < minUDPBufferSize || c.UDPBufferSize > 65507 {
		bad("gossip.udp_buffer_size: must be in [%d, 65507], got %d", minUDPBufferSize, c.UDPBufferSize)
	}
	return errors.Join(errs...)
}

// minUDPBufferSize leaves room for a small state after memberlist's headers.
const minUDPBufferSize = 512

// keys decodes SecretKey or Keys (the primary first); nil means no
// encryption. Errors name the field and the position, never the key.
func (c Config) keys() ([][]byte, error) {
	if c.SecretKey != "" && len(c.Keys) > 0 {
		return nil, errors.New("gossip.secret_key and gossip.keys: set one, not both")
	}
	if c.SecretKey != "" {
		k, err := DecodeKey(c.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("gossip.secret_key: %w", err)
		}
		return [][]byte{k}, nil
	}
	return decodeKeys("gossip.keys", c.Keys)
}

// decodeKeys decodes a keyring, naming each bad entry as field[i].
func decodeKeys(field string, keys []string) ([][]byte, error) {
	var out [][]byte
	var errs []error
	seen := map[string]int{}
	for i, s := range keys {
		k, err := DecodeKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", field, i, err))
			continue
		}
		if j, dup := seen[string(k)]; dup {
			errs = append(errs, fmt.Errorf("%s[%d]: same key as %s[%d]", field, i, field, j))
			continue
		}
		seen[string(k)] = i
		out = append(out, k)
	}
	return out, errors.Join(errs...)
}

// DecodeKey decodes one gossip key: the standard base64 of 16, 24 or 32
// bytes (AES-128, -192 or -256). Surrounding spaces are ignored. The error
// never contains the key.
func DecodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not valid base64 (standard encoding)")
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("must decode to 16, 24 or 32 bytes, got %d", len(key))
}

// IsLoopback reports whether a gossip bind address is only reachable from
// this host: "localhost" or a loopback IP (127.0.0.0/8, ::1). Anything
// else, the unspecified address ("0.0.0.0", "::") and host names
// included, counts as reachable from the network.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.IsLoopback()
}

// broadcastBudget is the largest message this node sends over UDP: the
// packet size minus memberlist's compound header (2), per-message overhead
// (2), user message type (1) and, with a key, encryption overhead (45 for
// the legacy format, 29 for the current one; we assume the larger).
func (c Config) broadcastBudget() int {
	b := c.UDPBufferSize - 5
	if c.SecretKey != "" || len(c.Keys) > 0 {
		b -= 45
	}
	return b
}

// memberlistConfig builds memberlist's configuration from c (which must be
// valid), starting from DefaultLocalConfig for the fields Config does not
// expose.
func (c Config) memberlistConfig(keyring *memberlist.Keyring, logOut io.Writer) *memberlist.Config {
	mc := memberlist.DefaultLocalConfig()
	mc.Name = c.Name
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort // memberlist fixes it up when BindPort is 0
	}
	// With a keyring, memberlist encrypts every packet and stream with the
	// primary key and drops any it cannot decrypt with one of the keys
	// (GossipVerifyIncoming and GossipVerifyOutgoing stay on).
	mc.Keyring = keyring
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.RetransmitMult = c.RetransmitMult
	mc.PushPullInterval = c.PushPullInterval
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.TCPTimeout = c.TCPTimeout
	mc.UDPBufferSize = c.UDPBufferSize
	mc.Logger = log.New(logOut, "", 0)
	// States are already DEFLATE-compressed when large; LZW over every
	// packet costs CPU on every send and receive for little gain.
	mc.EnableCompression = false
	return mc
}
