package httpproxy

// What the fast path (fast.go) writes: the request head as the gfe forwards
// it to a backend, the response head as it relays it to the client, and the
// gfe's own answers.

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/h1"
)

// writeRequestHead writes fr's head, as the gfe forwards it to backend
// addr, to w.
func writeRequestHead(w *bufio.Writer, fr *FastRequest, d *decision, addr string) {
	h := &fr.Head
	w.Write(h.Method)
	w.WriteByte(' ')
	if fr.rewrite {
		w.WriteString(fr.path.Escaped)
		w.Write(h.Target[fr.pathLen:])
	} else {
		w.Write(h.Target)
	}
	w.WriteString(" HTTP/1.1\r\n")
	strip := ""
	if a := d.svc.Affinity(); a != nil && a.Type() == config.AffinityGeneratedCookie {
		strip = a.Cookie()
	}
	conn := hasField(h.Fields, "connection")
	for _, f := range h.Fields {
		switch {
		case h1.EqualFold(f.Name, "te"):
			if hasToken(f.Value, "trailers") {
				w.WriteString("Te: trailers\r\n")
			}
			continue
		case hopByHop(f.Name), forwardedField(f.Name):
			continue
		case conn && nominated(h.Fields, f.Name):
			continue
		case strip != "" && h1.EqualFold(f.Name, "cookie"):
			writeCookieWithout(w, f.Value, strip)
			continue
		}
		writeField(w, f)
	}
	if len(h.Host) == 0 {
		w.WriteString("Host: ")
		w.WriteString(addr)
		w.WriteString("\r\n")
	}
	w.WriteString("X-Forwarded-For: ")
	w.Write(fr.Remote.Addr().Unmap().AppendTo(fr.scratch[:0]))
	w.WriteString("\r\nX-Forwarded-Host: ")
	w.Write(h.Host)
	if fr.TLS {
		w.WriteString("\r\nX-Forwarded-Proto: https\r\n\r\n")
	} else {
		w.WriteString("\r\nX-Forwarded-Proto: http\r\n\r\n")
	}
}

func writeField(w *bufio.Writer, f h1.Field) {
	w.Write(f.Name)
	w.WriteString(": ")
	w.Write(f.Value)
	w.WriteString("\r\n")
}

// writeCookieWithout writes a Cookie field with value v less every cookie
// called name; nothing when none is left.
func writeCookieWithout(w *bufio.Writer, v []byte, name string) {
	first := true
	for rest := v; len(rest) > 0; {
		var part []byte
		part, rest, _ = bytes.Cut(rest, []byte{';'})
		part = bytes.TrimSpace(part)
		if len(part) == 0 {
			continue
		}
		if k, _, _ := bytes.Cut(part, []byte{'='}); string(k) == name {
			continue
		}
		if first {
			w.WriteString("Cookie: ")
			first = false
		} else {
			w.WriteString("; ")
		}
		w.Write(part)
	}
	if !first {
		w.WriteString("\r\n")
	}
}

// hopByHop reports whether a field named name is hop-by-hop (RFC 9110
// §7.6.1; the list httputil.ReverseProxy removes).
func hopByHop(name []byte) bool {
	switch len(name) {
	case 2:
		return h1.EqualFold(name, "te")
	case 7:
		return h1.EqualFold(name, "trailer") || h1.EqualFold(name, "upgrade")
	case 10:
		return h1.EqualFold(name, "connection") || h1.EqualFold(name, "keep-alive")
	case 16:
		return h1.EqualFold(name, "proxy-connection")
	case 17:
		return h1.EqualFold(name, "transfer-encoding")
	case 18:
		return h1.EqualFold(name, "proxy-authenticate")
	case 19:
		return h1.EqualFold(name, "proxy-authorization")
	}
	return false
}

// forwardedField reports whether a client's field named name is one the
// gfe sets itself or drops: Forwarded, X-Forwarded-For, -Host, -Proto
// (ReverseProxy removes them before Rewrite) and X-Real-IP.
func forwardedField(name []byte) bool {
	switch len(name) {
	case 9:
		return h1.EqualFold(name, "forwarded") || h1.EqualFold(name, "x-real-ip")
	case 15:
		return h1.EqualFold(name, "x-forwarded-for")
	case 16:
		return h1.EqualFold(name, "x-forwarded-host")
	case 17:
		return h1.EqualFold(name, "x-forwarded-proto")
	}
	return false
}

// hasField reports whether fields has one named lower (lower-case).
func hasField(fields []h1.Field, lower string) bool {
	for _, f := range fields {
		if h1.EqualFold(f.Name, lower) {
			return true
		}
	}
	return false
}

// nominated reports whether a Connection field of fields names name.
func nominated(fields []h1.Field, name []byte) bool {
	for _, f := range fields {
		if !h1.EqualFold(f.Name, "connection") {
			continue
		}
		for tok := range h1.Tokens(f.Value) {
			if bytes.EqualFold(tok, name) {
				return true
			}
		}
	}
	return false
}

// hasToken reports whether list value v has the element tok (lower-case).
func hasToken(v []byte, tok string) bool {
	for t := range h1.Tokens(v) {
		if h1.EqualFold(t, tok) {
			return true
		}
	}
	return false
}

// writeResponseHead writes the response head in buf (parsed into r) as the
// gfe answers it: HTTP/1.1, hop-by-hop fields removed, the framing the
// client gets (chunked to an HTTP/1.1 client of fr; fr nil for a 1xx),
// setCookie if not "", and Connection: close or keep-alive.
func writeResponseHead(w *bufio.Writer, buf []byte, r *h1.Response, fr *FastRequest, setCookie string, close, keepAlive bool) {
	end := bytes.IndexByte(buf, '\r')
	w.WriteString("HTTP/1.1")
	w.Write(buf[8:end])
	w.WriteString("\r\n")
	conn := hasField(r.Fields, "connection")
	for _, f := range r.Fields {
		if h1.EqualFold(f.Name, "trailer") && r.Framing == h1.Chunked && fr != nil && fr.Head.Minor == 1 {
			writeField(w, f) // trailers pass through with the chunks
			continue
		}
		if hopByHop(f.Name) || (conn && nominated(r.Fields, f.Name)) {
			continue
		}
		writeField(w, f)
	}
	if r.Framing == h1.Chunked && fr != nil && fr.Head.Minor == 1 {
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if setCookie != "" {
		w.WriteString("Set-Cookie: ")
		w.WriteString(setCookie)
		w.WriteString("\r\n")
	}
	switch {
	case fr == nil:
	case close:
		w.WriteString("Connection: close\r\n")
	case keepAlive:
		w.WriteString("Connection: keep-alive\r\n")
	}
	w.WriteString("\r\n")
}

// fastAnswer writes an answer of the gfe's own (not flushed), as
// http.Error would: status, a text/plain msg, Retry-After if set, and
// Connection: close when close. It reports false when close.
func (p *Proxy) fastAnswer(fr *FastRequest, status int, msg, retryAfter string, close bool) bool {
	w := fr.Out
	b := fr.scratch[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	w.Write(b)
	w.WriteString(http.StatusText(status))
	w.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: ")
	w.Write(strconv.AppendInt(fr.scratch[:0], int64(len(msg)+1), 10))
	w.WriteString("\r\n")
	if retryAfter != "" {
		w.WriteString("Retry-After: ")
		w.WriteString(retryAfter)
		w.WriteString("\r\n")
	}
	if close {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
	if !fr.isHead {
		w.WriteString(msg)
		w.WriteString("\n")
	}
	return !close
}
