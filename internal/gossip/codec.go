package gossip

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Wire format. A message (one NodeState, sent directly or by gossip) is a
// route byte followed by a frame; the push/pull payload (all states) is a
// frame. The route says how the message travelled:
//
//	routeDirect  sent by the publisher straight to this node
//	routeGossip  sent through memberlist's gossip (by the publisher or a relay)
//
// Only gossip messages are relayed: a direct message says the publisher is
// already sending to every member, so relaying it would only multiply
// traffic. A frame is:
//
//	byte 0     codec: codecJSON or codecDeflateJSON
//	bytes 1..  the JSON document, raw or compressed with DEFLATE (RFC 1951)
//
// A single state is the JSON of NodeState; the push/pull payload is the JSON
// of stateList. Unknown JSON fields are ignored so that a newer publisher can
// add fields; a new incompatible encoding must take a new codec byte.
const (
	codecJSON        byte = 1
	codecDeflateJSON byte = 2
)

const (
	routeDirect byte = 1
	routeGossip byte = 2
)

// withRoute returns the message carrying frame along route.
func withRoute(route byte, frame []byte) []byte {
	msg := make([]byte, 1+len(frame))
	msg[0] = route
	copy(msg[1:], frame)
	return msg
}

// splitRoute splits a message into its route and frame.
func splitRoute(msg []byte) (byte, []byte, error) {
	if len(msg) == 0 {
		return 0, nil, fmt.Errorf("%w: empty message", errMalformed)
	}
	if r := msg[0]; r != routeDirect && r != routeGossip {
		return 0, nil, fmt.Errorf("%w: unknown route %d", errMalformed, r)
	}
	return msg[0], msg[1:], nil
}

const (
	// compressAbove is the JSON size, in bytes, above which a frame is
	// compressed (when that makes it smaller). Small states are cheaper
	// to send raw; memberlist may still compress whole packets.
	compressAbove = 256
	// maxDecodedBytes bounds the decompressed size of a frame, so that a
	// small hostile frame cannot inflate into gigabytes.
	maxDecodedBytes = 16 << 20
)

// errMalformed is wrapped by every decoding error.
var errMalformed = errors.New("gossip: malformed frame")

// stateList is the push/pull payload: every state the sender can see.
type stateList struct {
	States []NodeState `json:"states"`
}

// rawStateList is stateList with each state's JSON as it travels (seals and
// fields this version does not know included), which is how a Node builds
// and reads push/pull payloads.
type rawStateList struct {
	States []json.RawMessage `json:"states"`
}

// encodeFrame returns the frame carrying v.
func encodeFrame(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("gossip: encode: %w", err)
	}
	return encodeJSONFrame(js)
}

// writers reuses DEFLATE writers: a new one allocates and clears about a
// megabyte, which cost milliseconds per published state, far more than
// compressing it. BestSpeed: states are small and published often; the
// ratio on JSON is close to the default level's.
var writers = sync.Pool{New: func() any {
	w, err := flate.NewWriter(nil, flate.BestSpeed)
	if err != nil {
		panic(err) // only for an invalid level
	}
	return w
}}

// encodeJSONFrame returns the frame carrying the JSON document js.
func encodeJSONFrame(js []byte) ([]byte, error) {
	if len(js) > compressAbove {
		var buf bytes.Buffer
		buf.Grow(len(js)/2 + 16)
		buf.WriteByte(codecDeflateJSON)
		w := writers.Get().(*flate.Writer)
		defer writers.Put(w)
		w.Reset(&buf)
		if _, err := w.Write(js); err != nil {
			return nil, fmt.Errorf("gossip: encode: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("gossip: encode: %w", err)
		}
		if buf.Len() < len(js)+1 {
			return buf.Bytes(), nil
		}
	}
	out := make([]byte, 1+len(js))
	out[0] = codecJSON
	copy(out[1:], js)
	return out, nil
}

// frameJSON returns the JSON document of a frame. The result may share b's
// memory (raw frames), so it is only valid as long as b is.
func frameJSON(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", errMalformed)
	}
	switch b[0] {
	case codecJSON:
		return b[1:], nil
	case codecDeflateJSON:
		// A bytes.Reader is an io.ByteReader, so flate reads no byte past
		// the end of its stream: what is left after it is trailing garbage.
		in := bytes.NewReader(b[1:])
		out, err := io.ReadAll(io.LimitReader(flate.NewReader(in), maxDecodedBytes+1))
		if err != nil {
			return nil, fmt.Errorf("%w: inflate: %w", errMalformed, err)
		}
		if len(out) > maxDecodedBytes {
			return nil, fmt.Errorf("%w: inflates to more than %d bytes", errMalformed, maxDecodedBytes)
		}
		if in.Len() > 0 {
			return nil, fmt.Errorf("%w: %d bytes after the compressed stream", errMalformed, in.Len())
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w: unknown codec %d", errMalformed, b[0])
	}
}

// decodeFrame decodes a frame into v. It reads b only during the call.
func decodeFrame(b []byte, v any) error {
	js, err := frameJSON(b)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, v); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	return nil
}

// wireState is one received state with what its seal needs.
type wireState struct {
	// state is the decoded state (Sealed is false until a Node verified
	// the seal).
	state NodeState
	// wire is the state's JSON as received, owned by the wireState.
	wire []byte
	// body and seal are the signed JSON and the seal of a sealed state;
	// nil when the state has no seal member.
	body []byte
	seal *sealWire
	// sealErr says why a seal member could not be split off (the state
	// is then refused as bad_seal).
	sealErr error
	// cached is the DecodeCache entry the state came from (nil without
	// a cache): its fields are shared with the other Nodes of the
	// process and must not be modified.
	cached *decodedState
}

// decodeStateJSON decodes and validates the JSON of one state, which it
// keeps (the caller must not change js afterwards). The fields of a sealed
// state are decoded from its signed body, so that they are exactly what its
// signature covers.
func decodeStateJSON(js []byte) (wireState, error) {
	// Two decodes rather than NodeState embedded in one struct, so that
	// the seal is found whatever NodeState's own JSON decoding becomes.
	var st NodeState
	if err := json.Unmarshal(js, &st); err != nil {
		return wireState{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	var seal struct {
		Seal json.RawMessage `json:"seal"`
	}
	if err := json.Unmarshal(js, &seal); err != nil {
		return wireState{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	ws := wireState{state: st, wire: js}
	if seal.Seal != nil {
		body, sw, err := splitSeal(js)
		if err == nil {
			var s NodeState
			if err = json.Unmarshal(body, &s); err == nil {
				ws.state, ws.body, ws.seal = s, body, &sw
			}
		}
		ws.sealErr = err
	}
	ws.state.Sealed = false
	if err := ws.state.validateRemote(); err != nil {
		return wireState{}, fmt.Errorf("node %q: %w", ws.state.Node, err)
	}
	return ws, nil
}

// decodeWireState decodes and validates one received state, through cache
// when it is not nil. It reads b only during the call.
func decodeWireState(b []byte, cache *DecodeCache) (wireState, error) {
	js, err := frameJSON(b)
	if err != nil {
		return wireState{}, err
	}
	if cache != nil {
		return cache.decode(js)
	}
	return decodeStateJSON(bytes.Clone(js))
}

// decodeWireStates decodes a push/pull payload, through cache when it is
// not nil. It returns the valid states and one error per invalid one
// (joined), so one bad entry does not hide the others. It reads b only
// during the call.
func decodeWireStates(b []byte, cache *DecodeCache) ([]wireState, error) {
	var l rawStateList
	if err := decodeFrame(b, &l); err != nil {
		return nil, err
	}
	valid := make([]wireState, 0, len(l.States))
	var errs []error
	for i, raw := range l.States {
		var ws wireState
		var err error
		if cache != nil {
			ws, err = cache.decode(raw)
		} else {
			ws, err = decodeStateJSON(raw) // Unmarshal copied raw out of b
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("states[%d]: %w", i, err))
			continue
		}
		valid = append(valid, ws)
	}
	return valid, errors.Join(errs...)
}

// decodeState decodes and validates one received state.
func decodeState(b []byte) (NodeState, error) {
	ws, err := decodeWireState(b, nil)
	return ws.state, err
}

// decodeStates is decodeWireStates without the wire forms.
func decodeStates(b []byte) ([]NodeState, error) {
	ws, err := decodeWireStates(b, nil)
	var out []NodeState
	for _, w := range ws {
		out = append(out, w.state)
	}
	return out, err
}
