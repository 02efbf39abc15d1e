package benchpolicy

import (
	"fmt"
	"strings"

	"github.com/spillway-lb/spillway/config"
)

// Comparison is how waterfall fared against every hashing row: the question
// both policy benchmarks exist to answer.
type Comparison struct {
	// Rows is the number of hashing rows (hash2, hash3, hash5, any scope).
	Rows int
	// FewerOverCapacity and LowerP99 count the hashing rows waterfall beat
	// on OverCapacity and on P99Ms (strictly).
	FewerOverCapacity, LowerP99 int
	// Exceptions describe each hashing row waterfall did not beat, and on
	// what.
	Exceptions []string
}

// Scored is a row with the two figures Compare reads.
type Scored struct {
	Row
	// OverCapacity is the share of served requests that an instance served
	// above its capacity; P99Ms the p99 latency of served requests, ms.
	OverCapacity, P99Ms float64
}

// Compare compares the (last) waterfall row without options of rows with
// every hash2, hash3 and hash5 row: the question is about the policy, so
// waterfall+load_aware and the like are not it. ok is false when rows
// lack either.
func Compare(rows []Scored) (c Comparison, ok bool) {
	var wf *Scored
	for i := range rows {
		if rows[i].Policy == config.PolicyWaterfall && !rows[i].Any() {
			wf = &rows[i]
		}
	}
	if wf == nil {
		return Comparison{}, false
	}
	for _, row := range rows {
		switch row.Policy {
		case config.PolicyHash2, config.PolicyHash3, config.PolicyHash5:
		default:
			continue
		}
		c.Rows++
		if wf.OverCapacity < row.OverCapacity {
			c.FewerOverCapacity++
		} else {
			c.Exceptions = append(c.Exceptions, fmt.Sprintf("over-capacity: %s %s %s waterfall %s", row.ID(), pct(row.OverCapacity), relation(row.OverCapacity, wf.OverCapacity), pct(wf.OverCapacity)))
		}
		if wf.P99Ms < row.P99Ms {
			c.LowerP99++
		} else {
			c.Exceptions = append(c.Exceptions, fmt.Sprintf("p99: %s %.1f ms %s waterfall %.1f ms", row.ID(), row.P99Ms, relation(row.P99Ms, wf.P99Ms), wf.P99Ms))
		}
	}
	return c, c.Rows > 0
}

func relation(a, b float64) string {
	if a == b {
		return "="
	}
	return "<"
}

// String summarises c in one line, then one line per exception.
func (c Comparison) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "waterfall vs hashing: fewer over-capacity requests than %d of %d hashing rows, lower p99 than %d of %d",
		c.FewerOverCapacity, c.Rows, c.LowerP99, c.Rows)
	for _, e := range c.Exceptions {
		b.WriteString("\n  not better on ")
		b.WriteString(e)
	}
	return b.String()
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
