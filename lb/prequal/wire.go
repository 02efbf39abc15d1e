package prequal

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The probe answer's wire format: what a replica answers a probe with
// (the test backend's GET /.well-known/spillway-probe) and what the gfe
// parses. One line of ASCII, at most MaxAnswerSize bytes:
//
//	rif=<N> latency_us=<M>\n
//
// N is the replica's requests in flight (those it serves and those it
// queues), M its latency estimate in whole microseconds (the test backend
// sends the median of its recent requests' times). Both are unsigned
// decimal integers of at most 19 digits, with no sign, spaces or leading
// '+'; the two fields come in this order, separated by one space; the
// final newline is optional. Nothing else is accepted: a replica that
// sends anything else has its answer refused (ParseAnswer's error), and
// one that sends values beyond MaxRIF or MaxLatency has them clamped.

// The bounds of a probe answer.
const (
	// MaxAnswerSize is the most bytes an answer may have; a reader reads
	// at most one byte more.
	MaxAnswerSize = 64
	// MaxRIF is the largest requests-in-flight count taken from a probe;
	// a larger one is clamped to it.
	MaxRIF = 1 << 20
	// MaxLatency is the largest latency estimate taken from a probe; a
	// larger one is clamped to it.
	MaxLatency = time.Minute
)

// ErrAnswer wraps every error of ParseAnswer.
var ErrAnswer = errors.New("prequal: bad probe answer")

// Answer is one parsed probe answer, within bounds.
type Answer struct {
	// RIF is the replica's requests in flight, in [0, MaxRIF].
	RIF int64
	// Latency is its latency estimate, in [0, MaxLatency], whole
	// microseconds.
	Latency time.Duration
	// Clamped is whether a value was beyond its bound and clamped.
	Clamped bool
}

// AppendAnswer appends the wire form of an answer with rif requests in
// flight and latency estimate latency (negative values written as 0,
// latency truncated to microseconds) to dst and returns it.
func AppendAnswer(dst []byte, rif int64, latency time.Duration) []byte {
	dst = append(dst, "rif="...)
	dst = strconv.AppendInt(dst, max(rif, 0), 10)
	dst = append(dst, " latency_us="...)
	dst = strconv.AppendInt(dst, max(latency.Microseconds(), 0), 10)
	return append(dst, '\n')
}

// ParseAnswer parses an answer in the wire form above. It returns an error
// wrapping ErrAnswer for anything else (too long, a missing or unknown
// field, a sign, an overflow); values beyond MaxRIF or MaxLatency are
// clamped and the answer marked Clamped. It does not allocate on success.
func ParseAnswer(b []byte) (Answer, error) {
	if len(b) > MaxAnswerSize {
		return Answer{}, fmt.Errorf("%w: %d bytes, at most %d", ErrAnswer, len(b), MaxAnswerSize)
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	rest, ok := cutPrefix(b, "rif=")
	if !ok {
		return Answer{}, fmt.Errorf("%w: want \"rif=\" first", ErrAnswer)
	}
	rif, rest, err := number(rest)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: rif: %w", ErrAnswer, err)
	}
	rest, ok = cutPrefix(rest, " latency_us=")
	if !ok {
		return Answer{}, fmt.Errorf("%w: want \" latency_us=\" after rif", ErrAnswer)
	}
	us, rest, err := number(rest)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: latency_us: %w", ErrAnswer, err)
	}
	if len(rest) != 0 {
		return Answer{}, fmt.Errorf("%w: %d bytes after latency_us", ErrAnswer, len(rest))
	}
	a := Answer{RIF: int64(min(rif, MaxRIF))}
	maxUS := uint64(MaxLatency / time.Microsecond)
	a.Latency = time.Duration(min(us, maxUS)) * time.Microsecond
	a.Clamped = rif > MaxRIF || us > maxUS
	return a, nil
}

// cutPrefix is bytes.CutPrefix for a string prefix, without allocating.
func cutPrefix(b []byte, p string) ([]byte, bool) {
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return b, false
	}
	return b[len(p):], true
}

// errNumber is number's error: no digits, or more than 19.
var errNumber = errors.New("want 1 to 19 decimal digits")

// number reads an unsigned decimal of 1 to 19 digits (always below 2^63)
// at the start of b and returns it with the rest of b.
func number(b []byte) (uint64, []byte, error) {
	var v uint64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i == 19 {
			return 0, b, errNumber
		}
		v = v*10 + uint64(b[i]-'0')
	}
	if i == 0 {
		return 0, b, errNumber
	}
	return v, b[i:], nil
}
