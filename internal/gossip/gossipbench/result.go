package gossipbench

import (
	"fmt"
	"io"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// Result is what Run measured. Times are in seconds.
type Result struct {
	Nodes int `json:"nodes"`
	// Spread quantiles over every (change, receiving node) pair.
	SpreadP50   float64 `json:"spread_p50_s"`
	SpreadP99   float64 `json:"spread_p99_s"`
	SpreadP9999 float64 `json:"spread_p9999_s"`
	SpreadMax   float64 `json:"spread_max_s"`
	// SpreadSamples is changes × (nodes - 1); SpreadMissed the pairs
	// that had not seen their change when the wait ended.
	SpreadSamples int `json:"spread_samples"`
	SpreadMissed  int `json:"spread_missed"`
	// BytesPerNodePerS is every byte the nodes sent in the window (at
	// the transport: packets and streams, after encryption), per node per
	// second; StateBytesPerNodePerS the part that is our state messages
	// (before memberlist's framing and encryption).
	BytesPerNodePerS      float64 `json:"bytes_per_node_per_s"`
	StateBytesPerNodePerS float64 `json:"state_bytes_per_node_per_s"`
	// StateFrameBytes is the size of one node's state as a direct send
	// carries it (frame, seal without chain); PushPullBytes one node's
	// full view, as push/pull sends it.
	StateFrameBytes int `json:"state_frame_bytes"`
	PushPullBytes   int `json:"push_pull_bytes"`
	// DeadDetected quantiles of the time from the kill until each other
	// node's membership dropped the victim; DeadUndetected the nodes that
	// still listed it when the wait ended.
	DeadDetectedP50 float64 `json:"dead_detected_p50_s"`
	DeadDetectedP99 float64 `json:"dead_detected_p99_s"`
	DeadDetectedMax float64 `json:"dead_detected_max_s"`
	DeadUndetected  int     `json:"dead_undetected"`
	// FalseDeaths counts members declared dead or left during the window
	// (nobody was killed); StartupFalseDeaths those while the cluster
	// formed.
	FalseDeaths        uint64 `json:"false_deaths"`
	StartupFalseDeaths uint64 `json:"startup_false_deaths"`
	// StartupRepairs and StartupPushPulls count, over every node, the
	// membership repairs (joins of a node known only from its state) and
	// the full-view syncs merged while the cluster formed: the costs that
	// grow fastest with N.
	StartupRepairs   uint64 `json:"startup_repairs"`
	StartupPushPulls uint64 `json:"startup_push_pulls"`
	// StartupHealJoins counts the joins the benchmark made, once forming
	// stalled, for members that nodes lacked (members falsely declared
	// dead that did not come back by themselves).
	StartupHealJoins int `json:"startup_heal_joins"`
	// DroppedPackets counts packets lost to full receive queues.
	DroppedPackets uint64 `json:"dropped_packets"`
	// HeapBytes is the Go heap in use once the cluster formed and went
	// quiet, after a garbage collection (runtime.MemStats.HeapInuse);
	// HeapBytesPerPair divides it by nodes × (nodes - 1), the (node, peer)
	// pairs whose state and membership the nodes hold.
	HeapBytes        uint64  `json:"heap_bytes"`
	HeapBytesPerPair float64 `json:"heap_bytes_per_pair"`
	// StartupS is the time until every node held every member and state;
	// WindowS the steady window's length.
	StartupS float64 `json:"startup_s"`
	WindowS  float64 `json:"window_s"`

	// What ran.
	Sealed          bool    `json:"sealed"`
	Verified        bool    `json:"verified"`
	Encrypted       bool    `json:"encrypted"`
	Profile         string  `json:"profile"`
	Services        int     `json:"services"`
	Regions         int     `json:"regions"`
	LoadedGroups    int     `json:"loaded_groups"`
	PublishInterval float64 `json:"publish_interval_s"`
	BusyCores       int     `json:"busy_cores"`
	// Config is the gossip timings the nodes ran with.
	Config Timings `json:"config"`
}

// Timings are the gossip.Config fields that shape the figures.
type Timings struct {
	GossipInterval   float64 `json:"gossip_interval_s"`
	GossipNodes      int     `json:"gossip_nodes"`
	ProbeInterval    float64 `json:"probe_interval_s"`
	ProbeTimeout     float64 `json:"probe_timeout_s"`
	SuspicionMult    int     `json:"suspicion_mult"`
	PushPullInterval float64 `json:"push_pull_interval_s"`
	RejoinInterval   float64 `json:"rejoin_interval_s"`
	SealMaxAge       float64 `json:"seal_max_age_s"`
	UDPBufferSize    int     `json:"udp_buffer_size"`
}

func timings(c gossip.Config) Timings {
	return Timings{
		GossipInterval: c.GossipInterval.Seconds(), GossipNodes: c.GossipNodes,
		ProbeInterval: c.ProbeInterval.Seconds(), ProbeTimeout: c.ProbeTimeout.Seconds(), SuspicionMult: c.SuspicionMult,
		PushPullInterval: c.PushPullInterval.Seconds(), RejoinInterval: c.RejoinInterval.Seconds(),
		SealMaxAge: c.SealMaxAge.Seconds(), UDPBufferSize: c.UDPBufferSize,
	}
}

// WriteTable prints r as a few aligned lines.
func (r Result) WriteTable(w io.Writer) error {
	sealed := "sealed and verified"
	switch {
	case !r.Sealed:
		sealed = "NOT sealed"
	case !r.Verified:
		sealed = "sealed, seals NOT verified (--unverified)"
	}
	enc := "encrypted"
	if !r.Encrypted {
		enc = "NOT encrypted"
	}
	profile := r.Profile
	if profile == "" {
		profile = "daemon default"
	}
	_, err := fmt.Fprintf(w, `gossip: %d nodes in one process, states of %d services / %d regions / %d loaded groups, %s, %s, profile %s
  spread of a change   p50 %.3fs  p99 %.3fs  p99.99 %.3fs  max %.3fs  (%d samples, %d missed)
  bytes per node       %.0f B/s sent (state messages %.0f B/s) over %.0fs; a state is %d B, a full view %d B
  dead member noticed  p50 %.2fs  p99 %.2fs  max %.2fs  (%d never)
  false deaths         %d in the window, %d while forming (formed in %.1fs: %d repairs, %d push/pulls, %d heal joins); %d packets dropped
  memory               %.1f MB of heap in use once formed, %.0f B per (node, peer) pair
`, r.Nodes, r.Services, r.Regions, r.LoadedGroups, sealed, enc, profile,
		r.SpreadP50, r.SpreadP99, r.SpreadP9999, r.SpreadMax, r.SpreadSamples, r.SpreadMissed,
		r.BytesPerNodePerS, r.StateBytesPerNodePerS, r.WindowS, r.StateFrameBytes, r.PushPullBytes,
		r.DeadDetectedP50, r.DeadDetectedP99, r.DeadDetectedMax, r.DeadUndetected,
		r.FalseDeaths, r.StartupFalseDeaths, r.StartupS, r.StartupRepairs, r.StartupPushPulls, r.StartupHealJoins, r.DroppedPackets,
		float64(r.HeapBytes)/1e6, r.HeapBytesPerPair)
	return err
}
