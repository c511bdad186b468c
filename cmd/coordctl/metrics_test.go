package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads base/metrics as Prometheus does, in the text format, and
// parses it: a malformed exposition fails the test.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("/metrics: %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// metric returns the series of family name whose labels include the given
// name, value pairs, or nil.
func metric(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value returns a counter's or gauge's value.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	m := metric(fams, name, labels...)
	switch {
	case m == nil:
		return 0, false
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

func wantValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, want float64, labels ...string) {
	t.Helper()
	if v, ok := value(fams, name, labels...); !ok || v != want {
		t.Errorf("%s%q = %v (found: %v), want %v", name, labels, v, ok, want)
	}
}

// families lists the families whose names start with prefix: name, type
// and label names, one per line, sorted.
func families(fams map[string]*dto.MetricFamily, prefix string) string {
	var lines []string
	for name, f := range fams {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		lines = append(lines, fmt.Sprintf("%s %s {%s}", name, strings.ToLower(f.GetType().String()), strings.Join(labels, ",")))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}
