package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricFamilies is a parsed Prometheus page.
type metricFamilies map[string]*dto.MetricFamily

// scrape fetches and parses the Prometheus page at url (prometheus/common's
// text parser), failing t on any error.
func scrape(t testing.TB, url string) metricFamilies {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	return parseMetrics(t, resp.Body)
}

// parseMetrics parses a Prometheus page, failing t on a malformed one.
func parseMetrics(t testing.TB, r io.Reader) metricFamilies {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	return mf
}

// value returns the sum of the samples of metric (counter, gauge or
// untyped; a histogram's sample count) that carry every label of labels
// ("name=value"); 0 when none does.
func (m metricFamilies) value(metric string, labels ...string) float64 {
	f := m[metric]
	if f == nil {
		return 0
	}
	var sum float64
samples:
	for _, s := range f.GetMetric() {
		for _, want := range labels {
			k, v, _ := strings.Cut(want, "=")
			found := false
			for _, l := range s.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
					break
				}
			}
			if !found {
				continue samples
			}
		}
		switch {
		case s.Counter != nil:
			sum += s.GetCounter().GetValue()
		case s.Gauge != nil:
			sum += s.GetGauge().GetValue()
		case s.Untyped != nil:
			sum += s.GetUntyped().GetValue()
		case s.Histogram != nil:
			sum += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// metricValue returns the sum of metric's samples with every label of
// labels ("name=value") on the Prometheus page at url.
func metricValue(t testing.TB, url, metric string, labels ...string) float64 {
	t.Helper()
	return scrape(t, url).value(metric, labels...)
}
