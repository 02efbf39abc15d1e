// Package h1 parses HTTP/1.1 request heads for the gfe's fast path
// (docs/design.md §4, docs/listeners.md), as strictly as HAProxy and without
// allocating.
//
// Parse reads one request head (request line and header fields, up to the
// empty line) from a byte slice and says what the gfe must do with it:
//
//   - Fast: a plain HTTP/1.1 or HTTP/1.0 request with no body or a
//     Content-Length body, whose every byte is as RFC 9110 and RFC 9112
//     define them. The fast path may forward it.
//   - HandOff: well formed, but something the fast path leaves to net/http
//     (Upgrade and WebSocket, Expect, CONNECT, OPTIONS *, absolute-form
//     targets, chunked request bodies, methods it does not know, more
//     than MaxFields header fields). The caller replays the
//     bytes to net/http's server, which then behaves exactly as without a
//     fast path.
//   - Reject: malformed or ambiguous, in a way a front end and a back end
//     could read differently (request smuggling): the caller answers 400
//     and closes the connection. Request.Why says what was wrong.
//
// What is rejected, and why (RFC 9112 unless noted):
//
//   - Transfer-Encoding together with Content-Length (§6.1: a server may
//     reject it, and should close the connection; the ambiguity behind
//     CL.TE and TE.CL smuggling). Transfer-Encoding other than exactly
//     "chunked", or in an HTTP/1.0 request (§6.1).
//   - Content-Length that is not 1*DIGIT (signs, spaces, lists such as
//     "5, 5"), that overflows, or that appears twice (RFC 9110 §8.6 allows
//     identical duplicates; HAProxy and this package do not).
//   - Obsolete line folding (a field line starting with SP or HTAB, §5.2),
//     whitespace between a field name and its colon (§5.1), a bare LF as a
//     line ending (§2.2 allows a recipient to accept it; a front end that
//     does while its back end does not is a smuggling vector), NUL, CR or
//     any other control character but HTAB in a field value (RFC 9110
//     §5.5), field names that are not tokens, empty field names.
//   - Request lines that are not method SP target SP version CRLF with
//     single spaces, methods that are not tokens, targets with bytes
//     outside VCHAR (controls, spaces, non-ASCII), versions other than
//     HTTP/1.0 and HTTP/1.1 (HTTP/2's preface is handed off).
//   - HTTP/1.1 without exactly one Host field, a Host value that is not
//     host [":" port], and an absolute-form target whose authority differs
//     from Host.
//
// A head that the fast path takes is one net/http's server accepts with
// the same meaning (method, target, version, host, content length, fields,
// whether the connection closes): FuzzParseAgainstNetHTTP checks that for
// every input the fuzzer finds, and TestSmuggling holds a table of cases
// from the public literature, each with its expected verdict.
package h1
