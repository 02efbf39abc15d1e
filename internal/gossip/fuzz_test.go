package gossip

import (
	"testing"
)

// FuzzHandleMessage feeds arbitrary bytes to a node as memberlist hands
// them over from the network once decrypted: a state message (route byte
// and frame, NotifyMsg) and a push/pull payload (MergeRemoteState). Any
// input must either be counted invalid or leave only valid states in the
// view, and never panic; the node's own state is never replaced. The node
// verifies seals, so every state it believes but its own is Sealed; the
// seeds include sealed states, with and without their chain.
func FuzzHandleMessage(f *testing.F) {
	pki := newSealPKI(f)
	sealer, verifier := pki.sealer("self"), pki.verifier()
	for _, s := range []NodeState{gfeState(), cpState()} {
		pub := pki.sealedNode(s.Node, nil, nil)
		if _, err := pub.Publish(s); err != nil {
			f.Fatal(err)
		}
		f.Add(withRoute(routeDirect, pub.enc.full))
		f.Add(withRoute(routeGossip, pub.enc.lean))
		f.Add(pub.localView())
	}
	for _, s := range []NodeState{gfeState(), cpState(), bigGFEState(4, 4)} {
		frame, err := encodeFrame(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(withRoute(routeDirect, frame))
		f.Add(withRoute(routeGossip, frame))
	}
	list, err := encodeFrame(stateList{States: []NodeState{gfeState(), cpState()}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(list)
	f.Add([]byte{})
	f.Add([]byte{routeGossip})
	f.Add([]byte{routeDirect, codecDeflateJSON, 0xff, 0xff})
	f.Add(withRoute(routeGossip, append([]byte{codecJSON}, `{"node":"self","kind":"gfe","site":"s","version":18446744073709551615}`...)))
	f.Add(withRoute(routeGossip, append([]byte{codecJSON}, `{"node":"x","kind":"gfe","site":"s","version":1,"rtt_ms":{"r":-1}}`...)))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := DefaultConfig()
		cfg.Name = "self"
		n, err := New(cfg, Options{Sealer: sealer, Verifier: verifier})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Publish(NodeState{Kind: KindGFE, Site: "home"}); err != nil {
			t.Fatal(err)
		}
		// Every sender is a member, so accepted states become visible.
		for _, name := range []string{"x", "n", gfeState().Node, cpState().Node} {
			n.mu.Lock()
			n.tab.join(name, n.clock.Now())
			n.mu.Unlock()
		}
		n.handleMessage(b)
		n.handlePushPull(b)
		st := n.Stats()
		if st.Received != 1 || st.PushPulls != 1 {
			t.Fatalf("stats %+v after one message and one push/pull", st)
		}
		for name, s := range n.Snapshot().States {
			if name != s.Node {
				t.Fatalf("state of %q stored under %q", s.Node, name)
			}
			if err := s.validateRemote(); err != nil && name != "self" {
				t.Fatalf("an invalid state got into the view: %v", err)
			}
			if !s.Sealed {
				t.Fatalf("an unsealed state got into the view: %+v", s)
			}
		}
		if s := n.Snapshot().States["self"]; s.Site != "home" {
			t.Fatalf("the node's own state was replaced: %+v", s)
		}
	})
}
