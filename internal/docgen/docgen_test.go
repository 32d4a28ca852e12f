package docgen

import (
	"errors"
	"flag"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSplice(t *testing.T) {
	doc := "intro\n<!-- BEGIN GENERATED t -->\nold\n<!-- END GENERATED t -->\nend\n"
	out, err := Splice(doc, "t", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n<!-- BEGIN GENERATED t -->\nnew\n<!-- END GENERATED t -->\nend\n"; out != want {
		t.Fatalf("Splice = %q, want %q", out, want)
	}
	if got, err := Section(out, "t"); err != nil || got != "new\n" {
		t.Fatalf("Section = %q, %v", got, err)
	}
	for name, bad := range map[string]string{
		"missing":  "intro\n",
		"no end":   "<!-- BEGIN GENERATED t -->\nx\n",
		"reversed": "<!-- END GENERATED t --><!-- BEGIN GENERATED t -->\n",
		"twice":    doc + doc,
	} {
		if _, err := Section(bad, "t"); !errors.Is(err, ErrNoSection) {
			t.Errorf("%s: Section err = %v, want ErrNoSection", name, err)
		}
		if _, err := Splice(bad, "t", ""); !errors.Is(err, ErrNoSection) {
			t.Errorf("%s: Splice err = %v, want ErrNoSection", name, err)
		}
	}
}

func TestFlagTable(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("b-flag", 3, "a | pipe")
	fs.String("a-flag", "", "empty default")
	fs.String("host", "vm-1", "machine-dependent")
	got := FlagTable(Flags(fs, map[string]string{"host": "<hostname>"}))
	want := "| flag | default | meaning |\n|---|---|---|\n" +
		"| `--a-flag` |  | empty default |\n" +
		"| `--b-flag` | `3` | a \\| pipe |\n" +
		"| `--host` | `<hostname>` | machine-dependent |\n"
	if got != want {
		t.Fatalf("FlagTable:\n%s\nwant\n%s", got, want)
	}
}

func TestDescribe(t *testing.T) {
	cs := []prometheus.Collector{
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: `with "quotes"`}, []string{"worker", "dp_rank"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "a gauge"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "a histogram"}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "f", Help: "a func"}, func() float64 { return 1 }),
	}
	ms, err := Describe(cs)
	if err != nil {
		t.Fatal(err)
	}
	got := MetricTable(ms)
	want := "| metric | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `f` | gauge |  | a func |\n" +
		"| `g` | gauge |  | a gauge |\n" +
		"| `h_seconds` | histogram |  | a histogram |\n" +
		"| `x_total` | counter | `worker`, `dp_rank` | with \"quotes\" |\n"
	if got != want {
		t.Fatalf("MetricTable:\n%s\nwant\n%s", got, want)
	}
}
