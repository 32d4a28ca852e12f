package docgen

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is one metric family as the documentation shows it.
type Metric struct {
	Name   string
	Type   string // counter, gauge, histogram, summary, untyped; "" when unknown
	Labels []string
	Help   string
}

// descRE reads prometheus.Desc.String(), the only place a Desc's name,
// help and variable labels are readable from outside the package.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// ParseDesc reads d's name, help and variable labels.
func ParseDesc(d *prometheus.Desc) (Metric, error) {
	m := descRE.FindStringSubmatch(d.String())
	if m == nil {
		return Metric{}, fmt.Errorf("docgen: cannot read %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return Metric{}, fmt.Errorf("docgen: name of %s: %w", d, err)
	}
	help, err := strconv.Unquote(m[2])
	if err != nil {
		return Metric{}, fmt.Errorf("docgen: help of %s: %w", d, err)
	}
	var labels []string
	for _, l := range strings.Split(m[3], ",") {
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			labels = append(labels, l)
		}
	}
	return Metric{Name: name, Help: help, Labels: labels}, nil
}

// Describe lists, by name, the metric families cs describe, each typed by
// its collector's vector type or, for other collectors, by what it
// collects now (a family it describes but has no series of stays untyped,
// "").
func Describe(cs []prometheus.Collector) ([]Metric, error) {
	byName := map[string]Metric{}
	for _, c := range cs {
		collected := collectedTypes(c)
		for _, d := range describe(c) {
			m, err := ParseDesc(d)
			if err != nil {
				return nil, err
			}
			m.Type = vecType(c)
			if m.Type == "" {
				m.Type = collected[m.Name]
			}
			if prev, ok := byName[m.Name]; ok && prev.Type != "" && m.Type == "" {
				m.Type = prev.Type
			}
			byName[m.Name] = m
		}
	}
	out := make([]Metric, 0, len(byName))
	for _, m := range byName {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

func vecType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// collectedTypes is the type of each family c collects a series of now.
func collectedTypes(c prometheus.Collector) map[string]string {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]string{}
	for pm := range ch {
		var m dto.Metric
		if err := pm.Write(&m); err != nil {
			continue
		}
		md, err := ParseDesc(pm.Desc())
		if err != nil {
			continue
		}
		switch {
		case m.Counter != nil:
			out[md.Name] = "counter"
		case m.Gauge != nil:
			out[md.Name] = "gauge"
		case m.Histogram != nil:
			out[md.Name] = "histogram"
		case m.Summary != nil:
			out[md.Name] = "summary"
		default:
			out[md.Name] = "untyped"
		}
	}
	return out
}

// MetricTable renders metrics as a Markdown table: name, type, labels,
// meaning.
func MetricTable(metrics []Metric) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, m := range metrics {
		labels := make([]string, len(m.Labels))
		for i, l := range m.Labels {
			labels[i] = code(l)
		}
		b.WriteString("| " + code(m.Name) + " | " + m.Type + " | " + strings.Join(labels, ", ") + " | " + cell(m.Help) + " |\n")
	}
	return b.String()
}
