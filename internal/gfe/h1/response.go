package h1

import (
	"bytes"
	"errors"
)

// Response heads, for the fast path's side towards backends. A backend is
// trusted more than a client, but a response whose framing two parsers
// could read differently desynchronises the pooled connection it came on,
// so ParseResponse is as strict as Parse: a response it refuses is
// answered 502 and its connection is closed.

// ErrBadResponse is returned by ParseResponse for a malformed response
// head; Response.Why says what was wrong.
var ErrBadResponse = errors.New("h1: malformed response head")

// MaxResponseFields is how many header fields a Response holds; a head with
// more is refused.
const MaxResponseFields = 128

// Framing is how a response's body ends (RFC 9112 §6.3).
type Framing uint8

const (
	// NoBody: the response has no body (1xx, 204, 304, or a HEAD request).
	NoBody Framing = iota
	// Length: the body is ContentLength bytes.
	Length
	// Chunked: the body is in chunks, maybe followed by trailer fields.
	Chunked
	// UntilClose: the body ends when the backend closes the connection.
	UntilClose
)

// Response is one parsed response head. Its byte slices point into the
// buffer given to ParseResponse. A Response may be reused; ParseResponse
// allocates nothing once Fields has room for MaxResponseFields.
type Response struct {
	// Minor is the HTTP/1 minor version of the status line: 0 or 1.
	Minor int
	// Status is the status code, 100..599.
	Status int
	// Framing and ContentLength (-1 without one) say where the body ends.
	Framing       Framing
	ContentLength int64
	// Close says the backend closes the connection after this response:
	// Connection: close, HTTP/1.0 without keep-alive, or a body that ends
	// at the close.
	Close bool
	// Fields are the header fields in the order sent.
	Fields []Field
	// Why says, with ErrBadResponse, what was wrong.
	Why string
}

// ParseResponse parses the response head at the start of buf into r, for a
// request whose method was head (HEAD: the response has no body whatever
// it says). It returns the head's length; ErrIncomplete when buf ends
// before the head does; ErrBadResponse (with r.Why) for a malformed head.
func ParseResponse(buf []byte, head bool, r *Response) (int, error) {
	fields := r.Fields[:0]
	if fields == nil {
		fields = make([]Field, 0, MaxResponseFields)
	}
	*r = Response{Fields: fields, ContentLength: -1}
	p := parser{buf: buf}
	line, ok, bad := p.line()
	if !ok {
		return 0, ErrIncomplete
	}
	if bad != "" {
		return 0, r.bad(bad)
	}
	if why := r.statusLine(line); why != "" {
		return 0, r.bad(why)
	}
	var lengths, encodings int
	var keepAlive bool
	for {
		line, ok, bad := p.line()
		if !ok {
			return 0, ErrIncomplete
		}
		if bad != "" {
			return 0, r.bad(bad)
		}
		if len(line) == 0 {
			break
		}
		f, why := field(line)
		if why != "" {
			return 0, r.bad(why)
		}
		if len(r.Fields) == MaxResponseFields {
			return 0, r.bad("more than MaxResponseFields header fields")
		}
		r.Fields = append(r.Fields, f)
		switch {
		case equalFold(f.Name, "content-length"):
			lengths++
			cl, ok := parseLength(f.Value)
			if !ok {
				return 0, r.bad("Content-Length is not a decimal number")
			}
			r.ContentLength = cl
		case equalFold(f.Name, "transfer-encoding"):
			encodings++
			if !equalFold(f.Value, "chunked") {
				return 0, r.bad("Transfer-Encoding other than chunked")
			}
		case equalFold(f.Name, "connection"):
			for tok := range tokens(f.Value) {
				switch {
				case equalFold(tok, "close"):
					r.Close = true
				case equalFold(tok, "keep-alive"):
					keepAlive = true
				}
			}
		}
	}
	switch {
	case lengths > 1:
		return 0, r.bad("more than one Content-Length")
	case encodings > 1:
		return 0, r.bad("more than one Transfer-Encoding")
	case encodings > 0 && lengths > 0:
		return 0, r.bad("Transfer-Encoding with Content-Length")
	case encodings > 0 && r.Minor == 0:
		return 0, r.bad("Transfer-Encoding in HTTP/1.0")
	}
	if r.Minor == 0 && !keepAlive {
		r.Close = true
	}
	switch {
	case head || r.Status < 200 || r.Status == 204 || r.Status == 304:
		r.Framing = NoBody
	case encodings > 0:
		r.Framing = Chunked
	case lengths > 0:
		r.Framing = Length
	default:
		r.Framing = UntilClose
		r.Close = true
	}
	return p.pos, nil
}

func (r *Response) bad(why string) error {
	r.Why = why
	return ErrBadResponse
}

// statusLine parses HTTP-version SP 3DIGIT SP reason-phrase.
func (r *Response) statusLine(line []byte) string {
	if len(line) < 12 || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return "malformed status line"
	}
	switch string(line[:8]) {
	case "HTTP/1.1":
		r.Minor = 1
	case "HTTP/1.0":
		r.Minor = 0
	default:
		return "unsupported HTTP version"
	}
	s := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return "status code is not three digits"
		}
		s = s*10 + int(c-'0')
	}
	if s < 100 || s > 599 {
		return "status code out of range"
	}
	r.Status = s
	if len(line) > 13 {
		for _, c := range line[13:] {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return "control character in the reason phrase"
			}
		}
	}
	return ""
}

// ParseChunkSize parses a chunk-size line without its CRLF: 1*HEXDIG,
// optionally followed by chunk extensions (";" and anything but controls),
// which are ignored. ok is false for a malformed line or a size past
// maxContentLength.
func ParseChunkSize(line []byte) (n int64, ok bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		for _, c := range line[i:] {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return 0, false
			}
		}
		line = trimOWS(line[:i])
	}
	if len(line) == 0 || len(line) > 16 {
		return 0, false
	}
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		// Check before shifting: n<<4 must not wrap around int64.
		if n > (maxContentLength-int64(d))>>4 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// ParseTrailer checks one trailer field line (without its CRLF) of a
// chunked body by the rules of header fields.
func ParseTrailer(line []byte) (Field, bool) {
	if len(line) == 0 {
		return Field{}, false
	}
	f, why := field(line)
	return f, why == ""
}

// EqualFold reports whether b equals the lower-case ASCII s, ignoring
// case. It does not allocate.
func EqualFold(b []byte, s string) bool { return equalFold(b, s) }

// Tokens yields the comma-separated elements of a list field's value,
// without whitespace, skipping empty ones.
func Tokens(v []byte) func(yield func([]byte) bool) { return tokens(v) }
