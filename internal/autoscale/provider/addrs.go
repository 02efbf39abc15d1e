package provider

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ErrOutput is wrapped by every error of ParseAddresses.
var ErrOutput = errors.New("provider: bad scale-up output")

// maxHostLen is the longest DNS name (RFC 1035 §2.3.4, without the root
// dot).
const maxHostLen = 253

// ParseAddresses parses what a scale-up command prints: the new
// instances' addresses, host:port, one per line, at most limit of them. It
// is strict, so that a command that prints anything else (a log line, a
// message, a half-written address) fails loudly instead of adding a wrong
// instance:
//
//   - every line ends with "\n", the last one optionally not; no "\r";
//   - no empty line (an empty output is zero addresses), no spaces;
//   - host is an IP address (IPv6 in brackets, no zone) or a DNS name of
//     letters, digits, '-' and '.', labels of 1 to 63 bytes not starting or
//     ending with '-', 253 bytes at most;
//   - port is a decimal number in 1..65535, without a sign or leading
//     zeros;
//   - no address twice, and at most limit lines.
//
// Its errors wrap ErrOutput and name the line by number (from 1) and
// quote it.
func ParseAddresses(out []byte, limit int) ([]string, error) {
	if len(out) == 0 {
		return nil, nil
	}
	body := out
	if body[len(body)-1] == '\n' {
		body = body[:len(body)-1]
	}
	var addrs []string
	for n := 1; ; n++ {
		line, rest, more := bytes.Cut(body, []byte{'\n'})
		if problem := checkAddress(line); problem != "" {
			return nil, fmt.Errorf("%w: line %d %q: %s", ErrOutput, n, excerpt(line), problem)
		}
		if len(addrs) >= limit {
			return nil, fmt.Errorf("%w: line %d %q: more than the %d addresses asked for", ErrOutput, n, excerpt(line), limit)
		}
		a := string(line)
		for i, prev := range addrs {
			if prev == a {
				return nil, fmt.Errorf("%w: line %d %q: repeats line %d", ErrOutput, n, excerpt(line), i+1)
			}
		}
		addrs = append(addrs, a)
		if !more {
			return addrs, nil
		}
		body = rest
	}
}

// checkAddress returns what is wrong with line as host:port, or "".
func checkAddress(line []byte) string {
	if len(line) == 0 {
		return "empty line"
	}
	if i := bytes.IndexAny(line, " \t\r"); i >= 0 {
		return fmt.Sprintf("whitespace at byte %d", i+1)
	}
	host, port, err := net.SplitHostPort(string(line))
	if err != nil {
		return "want host:port"
	}
	if problem := checkPort(port); problem != "" {
		return problem
	}
	if host == "" {
		return "empty host"
	}
	if line[0] == '[' { // net.SplitHostPort took the brackets off
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			return "bracketed host is not an IPv6 address (without a zone)"
		}
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		if a, _ := netip.ParseAddr(host); a.Is6() {
			return "IPv6 host must be in brackets"
		}
		return ""
	}
	return checkDNSName(host)
}

// checkPort returns what is wrong with a port, or "".
func checkPort(s string) string {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return "port must be a number in 1..65535 without leading zeros"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return "port must be a number in 1..65535 without leading zeros"
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return "port must be a number in 1..65535 without leading zeros"
	}
	return ""
}

// checkDNSName returns what is wrong with a DNS host name, or "".
func checkDNSName(h string) string {
	if len(h) > maxHostLen {
		return fmt.Sprintf("host longer than %d bytes", maxHostLen)
	}
	label := 0
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == '.' {
			switch {
			case label == 0:
				return "empty label in host"
			case label > 63:
				return "host label longer than 63 bytes"
			case h[i-1] == '-' || h[i-label] == '-':
				return "host label starts or ends with '-'"
			}
			label = 0
			continue
		}
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Sprintf("host has %q, want letters, digits, '-' and '.'", c)
		}
		label++
	}
	return ""
}

// excerpt returns line, cut to 64 bytes, for an error message.
func excerpt(line []byte) string {
	const n = 64
	if len(line) > n {
		return string(line[:n]) + "..."
	}
	return string(line)
}
