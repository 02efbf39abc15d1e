package loadreport

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Where reports travel.
const (
	// Header is the HTTP response header that carries a report, in
	// canonical form (http.CanonicalHeaderKey of Envoy's
	// "endpoint-load-metrics").
	Header = "Endpoint-Load-Metrics"
	// GRPCTrailer is the gRPC trailer metadata key that carries a
	// serialized OrcaLoadReport per call. grpc/orca sets it on the server
	// and decodes it on the client (orca.ToLoadReport).
	GRPCTrailer = "endpoint-load-metrics-bin"
	// QueueMetric is the named metric that Report.Queue holds.
	QueueMetric = "queue"
)

// Errors of Parse; every error it returns wraps exactly one of them.
var (
	// ErrFormat: the header value does not start with TEXT, JSON or BIN
	// and a space.
	ErrFormat = errors.New("loadreport: unknown format")
	// ErrSyntax: the report is not well formed in its format (a TEXT
	// element that is not key=value, a repeated key, invalid JSON or
	// base64, a proto that does not decode).
	ErrSyntax = errors.New("loadreport: malformed report")
	// ErrValue: a value Report keeps is not a finite number >= 0.
	ErrValue = errors.New("loadreport: invalid value")
)

// Report is the part of an ORCA load report that Spillway reads. Every
// value that Parse returns is finite and >= 0; a field the backend did not
// report is 0.
type Report struct {
	// CPUUtilization, MemUtilization and ApplicationUtilization are
	// fractions of what the backend can use or serve. Above 1 means demand
	// above what the backend can serve (see Utilization).
	CPUUtilization, MemUtilization, ApplicationUtilization float64
	// RPSFractional is the requests per second the backend receives.
	RPSFractional float64
	// EPS is the errors per second the backend answers.
	EPS float64
	// Queue is the named metric "queue" (QueueMetric) if present, else 0:
	// the requests waiting for the backend to start them.
	Queue float64
}

// Utilization returns the backend's load as one number, the one gRPC's
// weighted round robin uses (gRFC A58): ApplicationUtilization when it is
// above 0, else CPUUtilization. 1 means the backend serves all it can;
// above 1 means demand above what it can serve (requests queue or are
// rejected), 1.5 meaning half as much again as its capacity.
func (r Report) Utilization() float64 {
	if r.ApplicationUtilization > 0 {
		return r.ApplicationUtilization
	}
	return r.CPUUtilization
}

// The fields of Report, as indices of a bit set of the TEXT keys seen.
const (
	fieldCPU = iota
	fieldMem
	fieldApp
	fieldRPS
	fieldEPS
	fieldQueue
)

// fieldOf returns the Report field of a TEXT key, or -1 for a key Report
// does not keep.
func fieldOf(key string) int {
	switch key {
	case "cpu_utilization":
		return fieldCPU
	case "mem_utilization":
		return fieldMem
	case "application_utilization":
		return fieldApp
	case "rps_fractional":
		return fieldRPS
	case "eps":
		return fieldEPS
	case "named_metrics." + QueueMetric:
		return fieldQueue
	}
	return -1
}

// set sets field f of r to v.
func (r *Report) set(f int, v float64) {
	switch f {
	case fieldCPU:
		r.CPUUtilization = v
	case fieldMem:
		r.MemUtilization = v
	case fieldApp:
		r.ApplicationUtilization = v
	case fieldRPS:
		r.RPSFractional = v
	case fieldEPS:
		r.EPS = v
	case fieldQueue:
		r.Queue = v
	}
}

// Parse reads the value of an Endpoint-Load-Metrics header (Header) in the
// TEXT, JSON or BIN format (see the package doc for the formats and for
// what Parse guarantees). Leading and trailing spaces are ignored.
func Parse(header string) (Report, error) {
	header = strings.TrimSpace(header)
	format, body, _ := strings.Cut(header, " ")
	switch format {
	case "TEXT":
		return parseText(body, len(format)+1)
	case "JSON":
		return parseJSON(strings.TrimSpace(body))
	case "BIN":
		return parseBin(strings.TrimSpace(body))
	}
	return Report{}, fmt.Errorf("%w %q: want TEXT, JSON or BIN, then a space and the report", ErrFormat, excerpt(format))
}

// parseText parses the body of a TEXT report, which starts at byte base of
// the header value. It does not allocate unless it fails.
func parseText(body string, base int) (Report, error) {
	var (
		r    Report
		seen uint8 // bit f: field f was set
	)
	off := base // of elem in the header value
	for n := 1; ; n++ {
		elem, rest, more := strings.Cut(body, ",")
		if e := trimOWS(elem); e != "" {
			if kind, problem := r.parseElement(e, &seen); kind != nil {
				at := off + len(elem) - len(trimLeftOWS(elem))
				return Report{}, fmt.Errorf("%w: TEXT element %d at byte %d %q: %s", kind, n, at, excerpt(e), problem)
			}
		}
		if !more {
			return r, nil
		}
		off += len(elem) + 1
		body = rest
	}
}

// parseElement parses one non-empty TEXT element, key=value, into r, and
// marks its field in seen. The value of a key Report does not keep is not
// read. On failure it returns ErrSyntax or ErrValue and what is wrong.
func (r *Report) parseElement(e string, seen *uint8) (kind error, problem string) {
	key, val, ok := strings.Cut(e, "=")
	if !ok {
		return ErrSyntax, "want key=value"
	}
	key = trimOWS(key)
	if key == "" {
		return ErrSyntax, "empty key"
	}
	f := fieldOf(key)
	if f < 0 {
		return nil, "" // forward compatible: not a field Spillway reads
	}
	if *seen&(1<<f) != 0 {
		return ErrSyntax, "key repeats an earlier element"
	}
	*seen |= 1 << f
	v, problem := parseValue(trimOWS(val))
	if problem != "" {
		return ErrValue, problem
	}
	r.set(f, v)
	return nil, ""
}

// parseValue parses a TEXT value: a finite number >= 0. It returns what is
// wrong with s, or "". It does not allocate unless it fails. -0 reads as
// 0.
func parseValue(s string) (float64, string) {
	if s == "" {
		return 0, "empty value"
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, "value is not a number"
	}
	if problem := check(v); problem != "" {
		return 0, problem
	}
	return v + 0, "" // + 0 turns -0 into 0
}

// check returns what makes v an invalid report value, or "" when it is
// finite and >= 0.
func check(v float64) string {
	switch {
	case math.IsNaN(v):
		return "value is NaN"
	case math.IsInf(v, 0):
		return "value is not finite"
	case v < 0:
		return "value is negative"
	}
	return ""
}

// trimOWS trims the optional whitespace of HTTP (spaces and tabs) around s.
func trimOWS(s string) string {
	s = trimLeftOWS(s)
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// trimLeftOWS trims the spaces and tabs that start s.
func trimLeftOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return s
}

// excerpt returns s, or its first 32 bytes and "...", for error messages
// about input of any length.
func excerpt(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// parseJSON parses the body of a JSON report: protojson of OrcaLoadReport.
func parseJSON(body string) (Report, error) {
	var m v3orcapb.OrcaLoadReport
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(body), &m); err != nil {
		return Report{}, fmt.Errorf("%w: JSON: %w", ErrSyntax, err)
	}
	return fromChecked(&m, "JSON")
}

// parseBin parses the body of a BIN report: base64 of a serialized
// OrcaLoadReport, with or without padding.
func parseBin(body string) (Report, error) {
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(body, "="))
	if err != nil {
		return Report{}, fmt.Errorf("%w: BIN: base64: %w", ErrSyntax, err)
	}
	var m v3orcapb.OrcaLoadReport
	if err := proto.Unmarshal(b, &m); err != nil {
		return Report{}, fmt.Errorf("%w: BIN: %w", ErrSyntax, err)
	}
	return fromChecked(&m, "BIN")
}

// fromChecked returns FromProto(m) after checking that every field Report
// keeps is valid, naming the first one that is not.
func fromChecked(m *v3orcapb.OrcaLoadReport, format string) (Report, error) {
	queue := m.GetNamedMetrics()[QueueMetric]
	for _, f := range [...]struct {
		name string
		v    float64
	}{
		{"cpu_utilization", m.GetCpuUtilization()},
		{"mem_utilization", m.GetMemUtilization()},
		{"application_utilization", m.GetApplicationUtilization()},
		{"rps_fractional", m.GetRpsFractional()},
		{"eps", m.GetEps()},
		{"named_metrics." + QueueMetric, queue},
	} {
		if problem := check(f.v); problem != "" {
			return Report{}, fmt.Errorf("%w: %s: %s %v: %s", ErrValue, format, f.name, f.v, problem)
		}
	}
	return FromProto(m), nil
}

// FromProto returns the Report of an ORCA load report proto, as gRPC
// delivers them per call (orca.ToLoadReport of the trailer GRPCTrailer) and
// out of band (orca.OOBListener). A nil m is the zero Report. When
// rps_fractional is 0 the deprecated integer rps is used in its place.
//
// FromProto cannot fail: a field that holds NaN, an infinity or a negative
// number reads as 0, as if the backend had not reported it (Parse rejects
// such a report instead).
func FromProto(m *v3orcapb.OrcaLoadReport) Report {
	if m == nil {
		return Report{}
	}
	rps := m.GetRpsFractional()
	if rps == 0 {
		rps = float64(m.GetRps()) //nolint:staticcheck // the deprecated field is the fallback
	}
	return Report{
		CPUUtilization:         valid(m.GetCpuUtilization()),
		MemUtilization:         valid(m.GetMemUtilization()),
		ApplicationUtilization: valid(m.GetApplicationUtilization()),
		RPSFractional:          valid(rps),
		EPS:                    valid(m.GetEps()),
		Queue:                  valid(m.GetNamedMetrics()[QueueMetric]),
	}
}

// valid returns v when it is a valid report value, else 0.
func valid(v float64) float64 {
	if check(v) != "" {
		return 0
	}
	return v + 0 // -0 reads as 0
}

// Format returns r as an Endpoint-Load-Metrics header value in the TEXT
// format:
//
//	TEXT application_utilization=A, cpu_utilization=C[, mem_utilization=M], rps_fractional=R[, eps=E], named_metrics.queue=Q
//
// The four fields Spillway weighs are always written, so that a reader
// sees an explicit 0; mem_utilization and eps only when not 0. Numbers are
// written in the shortest form that reads back exactly, so Parse(Format(r))
// returns r for every r whose values are finite and >= 0.
func Format(r Report) string {
	b := make([]byte, 0, 128)
	b = append(b, "TEXT "...)
	b = appendField(b, "application_utilization", r.ApplicationUtilization)
	b = appendField(append(b, ", "...), "cpu_utilization", r.CPUUtilization)
	if r.MemUtilization != 0 {
		b = appendField(append(b, ", "...), "mem_utilization", r.MemUtilization)
	}
	b = appendField(append(b, ", "...), "rps_fractional", r.RPSFractional)
	if r.EPS != 0 {
		b = appendField(append(b, ", "...), "eps", r.EPS)
	}
	b = appendField(append(b, ", "...), "named_metrics."+QueueMetric, r.Queue)
	return string(b)
}

func appendField(b []byte, key string, v float64) []byte {
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
