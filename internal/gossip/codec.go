package gossip

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// encodeFrame returns the frame carrying v.
func encodeFrame(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("gossip: encode: %w", err)
	}
	if len(js) > compressAbove {
		var buf bytes.Buffer
		buf.Grow(len(js)/2 + 16)
		buf.WriteByte(codecDeflateJSON)
		// BestSpeed: states are small and published often; the ratio on
		// JSON is close to the default level's.
		w, err := flate.NewWriter(&buf, flate.BestSpeed)
		if err != nil {
			return nil, fmt.Errorf("gossip: encode: %w", err)
		}
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

// decodeFrame decodes a frame into v. It reads b only during the call.
func decodeFrame(b []byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", errMalformed)
	}
	js := b[1:]
	switch b[0] {
	case codecJSON:
	case codecDeflateJSON:
		// A bytes.Reader is an io.ByteReader, so flate reads no byte past
		// the end of its stream: what is left after it is trailing garbage.
		in := bytes.NewReader(b[1:])
		out, err := io.ReadAll(io.LimitReader(flate.NewReader(in), maxDecodedBytes+1))
		if err != nil {
			return fmt.Errorf("%w: inflate: %w", errMalformed, err)
		}
		if len(out) > maxDecodedBytes {
			return fmt.Errorf("%w: inflates to more than %d bytes", errMalformed, maxDecodedBytes)
		}
		if in.Len() > 0 {
			return fmt.Errorf("%w: %d bytes after the compressed stream", errMalformed, in.Len())
		}
		js = out
	default:
		return fmt.Errorf("%w: unknown codec %d", errMalformed, b[0])
	}
	if err := json.Unmarshal(js, v); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	return nil
}

// decodeState decodes and validates one received state.
func decodeState(b []byte) (NodeState, error) {
	var s NodeState
	if err := decodeFrame(b, &s); err != nil {
		return NodeState{}, err
	}
	if err := s.validateRemote(); err != nil {
		return NodeState{}, err
	}
	return s, nil
}

// decodeStates decodes a push/pull payload. It returns the valid states and
// one error per invalid one (joined), so one bad entry does not hide the
// others.
func decodeStates(b []byte) ([]NodeState, error) {
	var l stateList
	if err := decodeFrame(b, &l); err != nil {
		return nil, err
	}
	valid := l.States[:0]
	var errs []error
	for i := range l.States {
		if err := l.States[i].validateRemote(); err != nil {
			errs = append(errs, fmt.Errorf("states[%d] (node %q): %w", i, l.States[i].Node, err))
			continue
		}
		valid = append(valid, l.States[i])
	}
	return valid, errors.Join(errs...)
}
