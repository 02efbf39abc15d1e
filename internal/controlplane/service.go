package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/lb/clock"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// NodeStatus is what the control plane knows about one gfe's snapshot
// stream(s), keyed by Node.id.
type NodeStatus struct {
	// ID, Site and BuildVersion (the gfe's release and revision) come from
	// the stream's first request.
	ID           string `json:"id"`
	Site         string `json:"site"`
	BuildVersion string `json:"build_version,omitempty"`
	// DeclaredFields is how many configuration fields the gfe said it
	// reads (Node.config_fields); 0 for a gfe from before 0.1.0, which
	// states none and is sent only the baseline's fields (config.BaselineFields).
	DeclaredFields int `json:"declared_fields"`
	// Dropped lists the fields the served configuration sets that the
	// gfe cannot read, so that its snapshots are sent without them
	// (config.MarshalFor): settings that gfe does not honour until it is
	// upgraded. Empty when it reads everything the configuration sets.
	Dropped []string `json:"dropped_fields,omitempty"`
	// Streams is the number of open streams from this node (normally 0 or
	// 1; a reconnect may overlap the old stream for a moment).
	Streams int `json:"streams"`
	// ConnectedAt is when the latest stream opened.
	ConnectedAt time.Time `json:"connected_at"`
	// Pushed is the version of the last snapshot sent.
	Pushed string `json:"pushed,omitempty"`
	// Acked is the version the node last acknowledged, or announced as
	// served when it connected and was therefore not pushed again.
	Acked   string    `json:"acked,omitempty"`
	AckedAt time.Time `json:"acked_at"`
	// Acks and Nacks count the node's answers to pushes.
	Acks  uint64 `json:"acks"`
	Nacks uint64 `json:"nacks"`
	// NacksInARow counts the node's NACKs since it last accepted a
	// snapshot (or announced the current one on connecting).
	NacksInARow uint64 `json:"nacks_in_a_row"`
	// Lagging is true while NacksInARow > 0: the node refused the latest
	// snapshot pushed to it and serves an older one (Acked), so health
	// changes no longer reach it. A refused snapshot is not pushed again
	// until the content changes, so one refusal is enough to lag.
	Lagging bool `json:"lagging"`
	// LastNack is the node's last rejection, nil if none.
	LastNack *Nack `json:"last_nack,omitempty"`
}

// Nack is one rejected snapshot.
type Nack struct {
	// Version is the rejected snapshot's version.
	Version string `json:"version"`
	// Serving is the version the node said it keeps serving.
	Serving string `json:"serving"`
	// Code and Error are the node's error_detail.
	Code  codes.Code `json:"code"`
	Error string     `json:"error"`
	At    time.Time  `json:"at"`
}

// service implements the ControlPlane gRPC service over the hub's States.
//
// StreamSnapshots follows the protocol in controlplane.proto: every stream
// gets the current State once it is Ready (unless the gfe already serves
// that version), then a push each time the State's Version changes; the
// latest push's ACK or NACK is recorded per node, answers to superseded
// pushes are ignored, and a NACK never stops later pushes.
//
// All methods are safe for concurrent use.
type service struct {
	pb.UnimplementedControlPlaneServer

	// Immutable after newService.
	self    string
	hub     *hub
	clock   clock.Clock
	log     zerolog.Logger
	m       *metrics
	closing chan struct{} // closed by shutdown
	// capacity answers RequestCapacity; nil without an autoscaler. Set
	// once by New before serving.
	capacity capacityDemander
	// forms are the configuration's forms for gfes of earlier releases.
	forms wireForms

	closeOnce sync.Once

	mu sync.Mutex
	// Guarded by mu.
	nodes map[string]*NodeStatus
}

func newService(self string, h *hub, clk clock.Clock, log zerolog.Logger, m *metrics) *service {
	return &service{
		self:    self,
		hub:     h,
		clock:   clock.OrReal(clk),
		log:     log.With().Str("component", "grpc").Logger(),
		m:       m,
		closing: make(chan struct{}),
		nodes:   map[string]*NodeStatus{},
	}
}

// shutdown ends every open stream with UNAVAILABLE (so gfes move to another
// replica) and refuses new ones.
func (s *service) shutdown() { s.closeOnce.Do(func() { close(s.closing) }) }

// Node returns the status of the gfe with id.
func (s *service) Node(id string) (NodeStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[id]
	if !ok {
		return NodeStatus{}, false
	}
	return copyNode(n), true
}

// Nodes returns the status of every gfe seen since start, sorted by id.
func (s *service) Nodes() []NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]NodeStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, copyNode(n))
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func copyNode(n *NodeStatus) NodeStatus {
	c := *n
	c.Dropped = slices.Clone(n.Dropped)
	if n.LastNack != nil {
		nk := *n.LastNack
		c.LastNack = &nk
	}
	return c
}

// joinErrors joins errs' messages on one line.
func joinErrors(errs []error) string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// StreamSnapshots serves one gfe's snapshot stream.
func (s *service) StreamSnapshots(stream pb.ControlPlane_StreamSnapshotsServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return recvError(err)
	}
	n := first.GetNode()
	if n.GetId() == "" || n.GetSite() == "" {
		var errs []error
		if n.GetId() == "" {
			errs = append(errs, errors.New("node.id: required"))
		}
		if n.GetSite() == "" {
			errs = append(errs, errors.New("node.site: required"))
		}
		return status.Error(codes.InvalidArgument, joinErrors(errs))
	}
	id := n.GetId()
	log := s.log.With().Str("gfe", id).Str("site", n.GetSite()).Str("build", n.GetBuildVersion()).Logger()
	schema, declared := readerSchema(n)
	s.connect(n)
	defer s.disconnect(id)
	// Secrets go only to clients whose certificate the mutual TLS
	// handshake verified and allowed; in --insecure-plaintext mode no
	// stream is authenticated, so every one gets the redacted form.
	withSecrets := mtls.Authenticated(ctx)
	log.Info().Str("serving", first.GetVersionInfo()).Strs("peer_identities", mtls.PeerIdentities(ctx)).
		Bool("secrets", withSecrets).Int("declared_fields", len(n.GetConfigFields())).Bool("reads_every_field", schema == nil).
		Msg("gfe connected")
	if !declared {
		log.Info().Msg("gfe states no configuration schema (before 0.1.0): sending it only the baseline's fields")
	}

	reqs := make(chan *pb.SnapshotRequest)
	recvErr := make(chan error, 1)
	go recvRequests(ctx, stream, reqs, recvErr)

	var (
		seq       uint64
		nonce     string // of the latest push
		pushedVer string // of the latest push, or the version the gfe announced
		announced = first.GetVersionInfo()
		dropped   []string // of the latest push
	)
	for {
		st, changed := s.hub.Load()
		var form *wireForm
		var ver string
		if st != nil && st.Ready {
			form = s.forms.form(st.Config, schema)
			ver = st.versionAs(form)
		}
		// What the gfe cannot honour may change without its form: a
		// setting it cannot read, set where it had its default, leaves
		// its snapshot as it was (no push), and must show all the same.
		if form != nil && !slices.Equal(form.dropped, dropped) {
			dropped = form.dropped
			if len(dropped) > 0 {
				log.Warn().Strs("fields", dropped).Str("config", st.Config.Version).
					Msg("the configuration sets fields this gfe cannot read: sending it the snapshot without them; upgrade the gfe to honour them")
			}
			s.record(id, func(ns *NodeStatus) { ns.Dropped = form.dropped })
		}
		if form != nil && ver != pushedVer {
			if pushedVer == "" && announced == ver {
				// The gfe already serves this content (from this or
				// another replica): no push needed.
				pushedVer = ver
				s.record(id, func(ns *NodeStatus) {
					ns.Acked, ns.AckedAt = announced, s.clock.Now()
					ns.NacksInARow, ns.Lagging = 0, false
				})
			} else {
				seq++
				nonce = strconv.FormatUint(seq, 10)
				if err := stream.Send(st.snapshot(form, nonce, s.self, withSecrets)); err != nil {
					log.Info().Err(err).Msg("gfe stream ended while pushing")
					return nil
				}
				pushedVer = ver
				s.m.pushes.Inc()
				s.record(id, func(ns *NodeStatus) { ns.Pushed = ver })
				log.Debug().Str("version", ver).Str("nonce", nonce).Msg("snapshot pushed")
			}
		}
		select {
		case <-changed:
		case req := <-reqs:
			s.answer(log, id, req, nonce, pushedVer)
		case err := <-recvErr:
			if err != nil {
				log.Info().Err(err).Msg("gfe disconnected")
			} else {
				log.Info().Msg("gfe closed its stream")
			}
			return nil
		case <-s.closing:
			return status.Error(codes.Unavailable, "control plane shutting down")
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// recvRequests forwards the stream's requests to reqs until the stream
// ends, then sends the error (nil for a clean close by the gfe) on errc.
// A named function so stacks say what it is.
func recvRequests(ctx context.Context, stream pb.ControlPlane_StreamSnapshotsServer, reqs chan<- *pb.SnapshotRequest, errc chan<- error) {
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			errc <- err
			return
		}
		select {
		case reqs <- req:
		case <-ctx.Done():
			return
		}
	}
}

// recvError maps an error from the first Recv to the handler's result.
func recvError(err error) error {
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "stream closed before the first request")
	}
	return err
}

// answer records an ACK or NACK for the latest push; answers to other
// nonces are ignored.
func (s *service) answer(log zerolog.Logger, id string, req *pb.SnapshotRequest, nonce, pushed string) {
	if req.GetResponseNonce() == "" || req.GetResponseNonce() != nonce {
		log.Debug().Str("nonce", req.GetResponseNonce()).Str("latest", nonce).Msg("ignoring answer to a superseded push")
		return
	}
	now := s.clock.Now()
	if d := req.GetErrorDetail(); d != nil {
		s.m.nacks.Inc()
		nk := &Nack{Version: pushed, Serving: req.GetVersionInfo(), Code: codes.Code(d.GetCode()), Error: d.GetMessage(), At: now}
		var inARow uint64
		s.record(id, func(ns *NodeStatus) {
			ns.Nacks++
			ns.NacksInARow++
			ns.Lagging, ns.LastNack = true, nk
			inARow = ns.NacksInARow
		})
		log.Warn().Str("version", pushed).Str("serving", nk.Serving).Str("code", nk.Code.String()).
			Str("error", nk.Error).Uint64("nacks_in_a_row", inARow).
			Msg("gfe rejected snapshot (NACK): it keeps serving an older one and no longer follows health changes")
		return
	}
	s.m.acks.Inc()
	if v := req.GetVersionInfo(); v != pushed {
		log.Warn().Str("acked", v).Str("pushed", pushed).Msg("ACK names a version other than the one pushed")
	}
	s.record(id, func(ns *NodeStatus) {
		ns.Acks++
		ns.Acked, ns.AckedAt = req.GetVersionInfo(), now
		ns.NacksInARow, ns.Lagging = 0, false
	})
	log.Debug().Str("version", req.GetVersionInfo()).Msg("snapshot acknowledged")
}

func (s *service) connect(n *pb.Node) {
	s.m.connected.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	ns, ok := s.nodes[n.GetId()]
	if !ok {
		ns = &NodeStatus{ID: n.GetId()}
		s.nodes[n.GetId()] = ns
	}
	ns.Site, ns.BuildVersion, ns.DeclaredFields = n.GetSite(), n.GetBuildVersion(), len(n.GetConfigFields())
	ns.Streams++
	ns.ConnectedAt = s.clock.Now()
}

func (s *service) disconnect(id string) {
	s.m.connected.Dec()
	s.record(id, func(ns *NodeStatus) { ns.Streams-- })
}

// record applies f to node id's status under the lock.
func (s *service) record(id string, f func(*NodeStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns, ok := s.nodes[id]; ok {
		f(ns)
	}
}

// GetHealth returns the served health of one service's instances, or of
// every instance.
func (s *service) GetHealth(_ context.Context, req *pb.GetHealthRequest) (*pb.GetHealthResponse, error) {
	st, _ := s.hub.Load()
	if st == nil {
		return nil, status.Error(codes.Unavailable, "no configuration loaded yet")
	}
	groups := map[string]bool{}
	if name := req.GetService(); name != "" {
		svc, ok := st.Config.Config.Service(name)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "service %q not found in config version %s", name, st.Config.Version)
		}
		for _, b := range svc.Backends {
			groups[b.Group] = true
		}
	}
	resp := &pb.GetHealthResponse{Version: st.Version}
	for i, ih := range st.Health {
		if len(groups) == 0 || groups[ih.Group] {
			resp.Instances = append(resp.Instances, st.pbHealth[i])
		}
	}
	return resp, nil
}

// noAutoscaler is RequestCapacity's answer without an autoscaler.
const noAutoscaler = "no autoscaler configured"

// capacityDemander is what RequestCapacity asks: the autoscaler's
// controller (controller.Controller.Demand).
type capacityDemander interface {
	Demand(ctx context.Context, group string, wanted int) controller.DemandAnswer
}

// RequestCapacity validates, logs and counts a capacity request and hands
// it to the autoscaler: wanted_instances as such, extra_rps as one more
// instance than the group is recommended (the rules size it at the next
// tick from the load the gfes gossip). Without an autoscaler it refuses.
func (s *service) RequestCapacity(ctx context.Context, req *pb.CapacityRequest) (*pb.CapacityResponse, error) {
	if errs := validateCapacityRequest(req); len(errs) > 0 {
		s.m.capacityRequests.WithLabelValues(resultInvalid).Inc()
		return nil, status.Error(codes.InvalidArgument, joinErrors(errs))
	}
	if st, _ := s.hub.Load(); st != nil {
		svc, ok := st.Config.Config.Service(req.GetService())
		if !ok {
			s.m.capacityRequests.WithLabelValues(resultInvalid).Inc()
			return nil, status.Errorf(codes.NotFound, "service: %q not found", req.GetService())
		}
		if _, ok := svc.Backend(req.GetGroup()); !ok {
			s.m.capacityRequests.WithLabelValues(resultInvalid).Inc()
			return nil, status.Errorf(codes.NotFound, "group: service %q has no backend group %q", req.GetService(), req.GetGroup())
		}
	}
	ev := s.log.Info().Str("gfe", req.GetNodeId()).Str("site", req.GetSite()).Str("service", req.GetService()).
		Str("group", req.GetGroup()).Str("reason", req.GetReason().String()).Str("detail", req.GetDetail())
	wanted := 0
	switch w := req.GetWant().(type) {
	case *pb.CapacityRequest_WantedInstances:
		ev = ev.Uint32("wanted_instances", w.WantedInstances)
		wanted = int(min(w.WantedInstances, 1<<20))
	case *pb.CapacityRequest_ExtraRps:
		ev = ev.Float64("extra_rps", w.ExtraRps)
	}
	answer := controller.DemandAnswer{Message: noAutoscaler}
	if s.capacity != nil {
		if wanted == 0 {
			wanted = -1 // extra_rps: one more than recommended
		}
		answer = s.capacity.Demand(ctx, req.GetGroup(), wanted)
	}
	result := resultRefused
	if answer.Granted {
		result = resultGranted
	}
	s.m.capacityRequests.WithLabelValues(result).Inc()
	ev.Bool("granted", answer.Granted).Msg("capacity request: " + answer.Message)
	return &pb.CapacityResponse{Granted: answer.Granted, Message: answer.Message}, nil
}

// validateCapacityRequest returns one error per missing or invalid field,
// each naming the field.
func validateCapacityRequest(req *pb.CapacityRequest) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if req.GetNodeId() == "" {
		bad("node_id: required")
	}
	if req.GetSite() == "" {
		bad("site: required")
	}
	if req.GetService() == "" {
		bad("service: required")
	}
	if req.GetGroup() == "" {
		bad("group: required")
	}
	switch w := req.GetWant().(type) {
	case *pb.CapacityRequest_WantedInstances:
		if w.WantedInstances < 1 {
			bad("wanted_instances: must be >= 1, got %d", w.WantedInstances)
		}
	case *pb.CapacityRequest_ExtraRps:
		if !(w.ExtraRps > 0) || math.IsInf(w.ExtraRps, 0) {
			bad("extra_rps: must be finite and > 0, got %v", w.ExtraRps)
		}
	default:
		bad("want: exactly one of wanted_instances, extra_rps is required")
	}
	if _, ok := pb.CapacityReason_name[int32(req.GetReason())]; !ok {
		bad("reason: unknown value %d", req.GetReason())
	}
	return errs
}
