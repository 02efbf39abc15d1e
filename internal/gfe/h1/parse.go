package h1

import (
	"bytes"
	"errors"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Verdict is what the gfe must do with a request head (see the package
// documentation).
type Verdict uint8

const (
	// Fast: the fast path may forward the request.
	Fast Verdict = iota
	// HandOff: replay the bytes to net/http's server.
	HandOff
	// Reject: answer 400 and close the connection.
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Fast:
		return "fast"
	case HandOff:
		return "handoff"
	case Reject:
		return "reject"
	}
	return "unknown"
}

// ErrIncomplete is returned by Parse when buf holds no complete request
// head yet (no empty line): the caller reads more, up to its limit on the
// size of a head (then 431).
var ErrIncomplete = errors.New("h1: incomplete request head")

// MaxFields is how many header fields a Request holds; a head with more is
// handed off.
const MaxFields = 64

// maxContentLength bounds Content-Length values; larger ones are rejected
// rather than risking an overflow downstream.
const maxContentLength = 1 << 62

// Field is one header field line: its name as sent (any case) and its
// value without surrounding whitespace, both slices of the parsed buffer.
type Field struct {
	Name, Value []byte
}

// Request is one parsed request head. Its byte slices point into the
// buffer given to Parse and are valid as long as that buffer is. A Request
// may be reused: Parse resets it and allocates nothing once Fields has
// room for MaxFields.
type Request struct {
	Method, Target []byte
	// Minor is the HTTP/1 minor version: 0 or 1.
	Minor int
	// Host is the Host field's value (empty in an HTTP/1.0 request
	// without one).
	Host []byte
	// ContentLength is the Content-Length field's value, or -1 without
	// one.
	ContentLength int64
	// Chunked says the request carries Transfer-Encoding: chunked (always
	// handed off).
	Chunked bool
	// Close says the connection closes after this request: Connection:
	// close, or HTTP/1.0 without Connection: keep-alive.
	Close bool
	// Fields are the header fields in the order sent, Host included.
	Fields []Field
	// Why says, for HandOff and Reject, what decided it.
	Why string
}

func (r *Request) reset() {
	fields := r.Fields[:0]
	if fields == nil {
		fields = make([]Field, 0, MaxFields)
	}
	*r = Request{Fields: fields, ContentLength: -1}
}

// Parse parses the request head at the start of buf into r and returns the
// head's length in bytes (the body, if any, starts there) and the verdict.
// It returns ErrIncomplete, and nothing else, when buf ends before the
// head does; then r holds nothing of use. For Reject, n is 0: nothing
// after the bad head can be trusted.
func Parse(buf []byte, r *Request) (n int, v Verdict, err error) {
	r.reset()
	var p parser
	p.buf = buf
	line, ok, bad := p.line()
	if !ok {
		return 0, 0, ErrIncomplete
	}
	if bad != "" {
		return p.reject(r, bad)
	}
	if why := r.requestLine(line); why != "" {
		if why == WhyPreface {
			r.Why = why
			return p.pos, HandOff, nil
		}
		return p.reject(r, why)
	}
	var handoff string
	var hosts, lengths, encodings int
	var keepAlive bool
	for {
		line, ok, bad := p.line()
		if !ok {
			return 0, 0, ErrIncomplete
		}
		if bad != "" {
			return p.reject(r, bad)
		}
		if len(line) == 0 {
			break
		}
		f, why := field(line)
		if why != "" {
			return p.reject(r, why)
		}
		if len(r.Fields) == MaxFields {
			handoff = "more than MaxFields header fields"
		} else {
			r.Fields = append(r.Fields, f)
		}
		switch {
		case equalFold(f.Name, "content-length"):
			lengths++
			cl, ok := parseLength(f.Value)
			if !ok {
				return p.reject(r, "Content-Length is not a decimal number")
			}
			r.ContentLength = cl
		case equalFold(f.Name, "transfer-encoding"):
			encodings++
			if !equalFold(f.Value, "chunked") {
				return p.reject(r, "Transfer-Encoding other than chunked")
			}
			r.Chunked = true
		case equalFold(f.Name, "host"):
			hosts++
			if !validHost(f.Value) {
				return p.reject(r, "invalid Host")
			}
			r.Host = f.Value
		case equalFold(f.Name, "connection"):
			for tok := range tokens(f.Value) {
				switch {
				case equalFold(tok, "close"):
					r.Close = true
				case equalFold(tok, "keep-alive"):
					keepAlive = true
				case equalFold(tok, "upgrade"):
					handoff = "Connection: upgrade"
				}
			}
		case equalFold(f.Name, "upgrade"):
			handoff = "Upgrade"
		case equalFold(f.Name, "expect"):
			handoff = "Expect"
		}
	}
	switch {
	case lengths > 1:
		return p.reject(r, "more than one Content-Length")
	case encodings > 1:
		return p.reject(r, "more than one Transfer-Encoding")
	case r.Chunked && lengths > 0:
		return p.reject(r, "Transfer-Encoding with Content-Length")
	case r.Chunked && r.Minor == 0:
		return p.reject(r, "Transfer-Encoding in HTTP/1.0")
	case hosts > 1:
		return p.reject(r, "more than one Host")
	case hosts == 0 && r.Minor == 1:
		return p.reject(r, "HTTP/1.1 without Host")
	}
	if r.Minor == 0 && !keepAlive {
		r.Close = true
	}
	if auth, ok := absoluteAuthority(r.Target); ok {
		if hosts == 1 && !bytes.EqualFold(auth, r.Host) {
			return p.reject(r, "absolute-form target's authority differs from Host")
		}
		handoff = "absolute-form target"
	}
	switch {
	case r.Chunked:
		handoff = "chunked request body"
	case handoff == "" && !fastMethod(r.Method):
		handoff = "method not on the fast path"
	case handoff == "" && r.Target[0] != '/':
		handoff = "target not in origin form"
	}
	if handoff != "" {
		r.Why = handoff
		return p.pos, HandOff, nil
	}
	return p.pos, Fast, nil
}

// WhyPreface is the Request.Why of HTTP/2's connection preface, which is
// handed off (h2c with prior knowledge).
const WhyPreface = "HTTP/2 connection preface"

// parser walks buf line by line.
type parser struct {
	buf []byte
	pos int
}

// line returns the next line without its CRLF; ok is false when buf ends
// first, and bad says why a line is malformed (a bare LF).
func (p *parser) line() (line []byte, ok bool, bad string) {
	i := bytes.IndexByte(p.buf[p.pos:], '\n')
	if i < 0 {
		return nil, false, ""
	}
	line = p.buf[p.pos : p.pos+i]
	p.pos += i + 1
	if len(line) == 0 || line[len(line)-1] != '\r' {
		return nil, true, "bare LF as a line ending"
	}
	return line[:len(line)-1], true, ""
}

func (p *parser) reject(r *Request, why string) (int, Verdict, error) {
	r.Why = why
	return 0, Reject, nil
}

// requestLine parses method SP target SP version into r, or says what is
// wrong with it.
func (r *Request) requestLine(line []byte) string {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return "malformed request line"
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return "malformed request line"
	}
	r.Method, r.Target = line[:sp1], rest[:sp2]
	version := rest[sp2+1:]
	if !isToken(r.Method) {
		return "method is not a token"
	}
	for _, c := range r.Target {
		if c < 0x21 || c > 0x7e {
			return "target holds a byte outside VCHAR"
		}
	}
	if !validEscapes(r.Target) {
		return "target holds a malformed percent-encoding"
	}
	switch string(version) {
	case "HTTP/1.1":
		r.Minor = 1
	case "HTTP/1.0":
		r.Minor = 0
	case "HTTP/2.0":
		if string(r.Method) == "PRI" && string(r.Target) == "*" {
			return WhyPreface
		}
		return "unsupported HTTP version"
	default:
		return "unsupported HTTP version"
	}
	switch {
	case r.Target[0] == '/':
	case string(r.Target) == "*":
		if string(r.Method) != "OPTIONS" {
			return "asterisk-form target without OPTIONS"
		}
	case string(r.Method) == "CONNECT":
	default:
		if _, ok := absoluteAuthority(r.Target); !ok {
			return "target in no known form"
		}
	}
	return ""
}

// field splits a field line into name and value, or says what is wrong.
func field(line []byte) (Field, string) {
	if line[0] == ' ' || line[0] == '\t' {
		return Field{}, "obsolete line folding"
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return Field{}, "field line without a colon"
	}
	name := line[:colon]
	switch {
	case colon == 0:
		return Field{}, "empty field name"
	case name[colon-1] == ' ' || name[colon-1] == '\t':
		return Field{}, "whitespace before a field's colon"
	case !isToken(name):
		return Field{}, "field name is not a token"
	}
	value := trimOWS(line[colon+1:])
	for _, c := range value {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return Field{}, "control character in a field value"
		}
	}
	return Field{Name: name, Value: value}, ""
}

// parseLength parses 1*DIGIT up to maxContentLength.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		// Check before multiplying: n*10 must not wrap around int64.
		d := int64(c - '0')
		if n > (maxContentLength-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// fastMethod reports whether the fast path forwards requests of method m.
func fastMethod(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH":
		return true
	}
	return false
}

// absoluteAuthority returns the authority of an absolute-form target
// (http:// or https://, any case), and whether target is one.
func absoluteAuthority(target []byte) ([]byte, bool) {
	var rest []byte
	switch {
	case len(target) > 7 && equalFold(target[:7], "http://"):
		rest = target[7:]
	case len(target) > 8 && equalFold(target[:8], "https://"):
		rest = target[8:]
	default:
		return nil, false
	}
	end := len(rest)
	if i := bytes.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	return rest[:end], true
}

// validHost reports whether v is host [":" port]: a reg-name, IPv4 address
// or bracketed IPv6 literal, in the characters RFC 3986 allows there.
func validHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:[]%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validEscapes reports whether every % in t starts two hex digits.
func validEscapes(t []byte) bool {
	for i := 0; i < len(t); i++ {
		if t[i] != '%' {
			continue
		}
		if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
			return false
		}
		i += 2
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// isToken reports whether b is a non-empty RFC 9110 token (the token
// characters of x/net's httpguts, which net/http's server uses too).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// trimOWS trims spaces and tabs at both ends of b.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold reports whether b equals the lower-case ASCII s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// tokens yields the comma-separated elements of a list field's value,
// without whitespace, skipping empty ones.
func tokens(v []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(v) > 0 {
			var tok []byte
			if i := bytes.IndexByte(v, ','); i >= 0 {
				tok, v = v[:i], v[i+1:]
			} else {
				tok, v = v, nil
			}
			if tok = trimOWS(tok); len(tok) > 0 && !yield(tok) {
				return
			}
		}
	}
}
