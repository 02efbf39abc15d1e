package snapshot

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// FuzzSnapshotWire feeds arbitrary bytes through what a gfe does with a
// push from the network: proto decoding, then FromProto. It checks that
// neither panics and that an accepted snapshot lists only instances of its
// configuration. (FuzzFromProto varies fields of a well-formed message;
// this one also covers the wire format.)
func FuzzSnapshotWire(f *testing.F) {
	for _, m := range []*pb.Snapshot{push("v1", "1", 100, true), push("v2", "2", 1, false), {Version: "v"}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.Snapshot
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		s, err := FromProto(&m)
		if err != nil {
			return
		}
		if s.Version == "" {
			t.Fatal("accepted a snapshot without a version")
		}
		for a, ih := range s.Health {
			ref, ok := s.Config.Group(ih.Group)
			if !ok || !hasInstance(ref.Group, a) {
				t.Fatalf("accepted %s in %s, which the config does not have", a, ih.Group)
			}
		}
	})
}
