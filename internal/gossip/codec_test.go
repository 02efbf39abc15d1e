package gossip

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// bigGFEState has enough services (services × variants of them) to be
// compressed.
func bigGFEState(services, variants int) NodeState {
	s := gfeState()
	s.Demand = map[string]float64{}
	for i := range services {
		for j := range variants {
			s.Demand[fmt.Sprintf("service-%02d-variant-%d", i, j)] = float64(i*j) + 0.25
		}
	}
	return s
}

func TestEncodeDecodeState(t *testing.T) {
	tests := []struct {
		name      string
		in        NodeState
		wantCodec byte
	}{
		{name: "small gfe stays raw JSON", in: NodeState{Node: "g", Kind: KindGFE, Site: "s", Version: 1}, wantCodec: codecJSON},
		{name: "small control plane stays raw JSON", in: NodeState{Node: "cp", Kind: KindControlPlane, Version: 1, Groups: []GroupState{{Group: "g", Region: "r", Instances: 1}}}, wantCodec: codecJSON},
		{name: "control plane", in: cpState(), wantCodec: codecDeflateJSON},
		{name: "large gfe is compressed", in: bigGFEState(10, 6), wantCodec: codecDeflateJSON},
		{name: "gfe with load, a zero one included", in: NodeState{Node: "g", Kind: KindGFE, Site: "s", Version: 1,
			Load: map[string]GroupLoad{"a": {InFlight: 1.25, Requests: 30, Pending: 4}, "b": {}}}, wantCodec: codecJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame, err := encodeFrame(tt.in)
			if err != nil {
				t.Fatalf("encodeFrame: %v", err)
			}
			if frame[0] != tt.wantCodec {
				t.Errorf("codec = %d, want %d (frame %d bytes)", frame[0], tt.wantCodec, len(frame))
			}
			got, err := decodeState(frame)
			if err != nil {
				t.Fatalf("decodeState: %v", err)
			}
			if diff := cmp.Diff(tt.in, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeStateErrors(t *testing.T) {
	valid, err := encodeFrame(NodeState{Node: "cp", Kind: KindControlPlane, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	compressed, err := encodeFrame(cpState())
	if err != nil || compressed[0] != codecDeflateJSON {
		t.Fatalf("cpState: codec %d, %v; want a compressed frame", compressed[0], err)
	}
	var bomb bytes.Buffer
	bomb.WriteByte(codecDeflateJSON)
	w, _ := flate.NewWriter(&bomb, flate.BestCompression)
	zeros := make([]byte, 1<<20)
	for range maxDecodedBytes/len(zeros) + 1 {
		w.Write(zeros)
	}
	w.Close()

	tests := []struct {
		name    string
		in      []byte
		wantErr error
	}{
		{name: "empty", in: nil, wantErr: errMalformed},
		{name: "unknown codec", in: append([]byte{9}, valid[1:]...), wantErr: errMalformed},
		{name: "truncated JSON", in: valid[:len(valid)-3], wantErr: errMalformed},
		{name: "trailing garbage", in: append(bytes.Clone(valid), '}'), wantErr: errMalformed},
		{name: "trailing garbage after a compressed stream", in: append(bytes.Clone(compressed), '}'), wantErr: errMalformed},
		{name: "corrupt deflate", in: []byte{codecDeflateJSON, 0xff, 0xff, 0xff}, wantErr: errMalformed},
		{name: "decompression bomb", in: bomb.Bytes(), wantErr: errMalformed},
		{name: "valid JSON, invalid state", in: append([]byte{codecJSON}, `{"node":"x","kind":"gfe","version":1}`...), wantErr: ErrInvalidState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeState(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("decodeState() = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeStatesKeepsValidEntries(t *testing.T) {
	bad := gfeState()
	bad.Node = "bad"
	bad.Site = ""
	frame, err := encodeFrame(stateList{States: []NodeState{gfeState(), bad, cpState()}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeStates(frame)
	if !errors.Is(err, ErrInvalidState) {
		t.Errorf("decodeStates() error = %v, want one wrapping ErrInvalidState", err)
	}
	want := []NodeState{gfeState(), cpState()}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("decodeStates() valid states (-want +got):\n%s", diff)
	}
}

// FuzzDecodeState checks that any frame either fails cleanly or decodes to a
// valid state that survives a round trip.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []NodeState{gfeState(), cpState(), bigGFEState(4, 4)} {
		frame, err := encodeFrame(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	f.Add([]byte{codecJSON})
	f.Add([]byte{codecDeflateJSON, 1, 2, 3})
	f.Add(append([]byte{codecJSON}, `{"node":"n","kind":"gfe","site":"s","version":1,"demand":{"a":1e308}}`...))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		if err := s.validateRemote(); err != nil {
			t.Fatalf("decodeState accepted an invalid state: %v", err)
		}
		frame, err := encodeFrame(s)
		if err != nil {
			t.Fatalf("re-encoding a decoded state: %v", err)
		}
		again, err := decodeState(frame)
		if err != nil {
			t.Fatalf("decoding a re-encoded state: %v", err)
		}
		if diff := cmp.Diff(s, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzDecodeStates checks the push/pull decoder never panics and only
// returns valid states.
func FuzzDecodeStates(f *testing.F) {
	frame, err := encodeFrame(stateList{States: []NodeState{gfeState(), cpState()}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(frame)
	f.Add(append([]byte{codecJSON}, `{"states":[{"node":"a"},null]}`...))
	f.Fuzz(func(t *testing.T, b []byte) {
		states, _ := decodeStates(b)
		for _, s := range states {
			if err := s.validateRemote(); err != nil {
				t.Fatalf("decodeStates returned an invalid state: %v", err)
			}
		}
	})
}
