package docgen_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/app"
	"github.com/kvrouter/kvrouter/internal/docgen"
	"github.com/kvrouter/kvrouter/internal/docgen/metricset"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/ (go generate ./internal/docgen)")

const docsDir = "../../docs"

// machineDefaults are flag defaults that depend on where the flag set is
// built, as the documentation states them.
var machineDefaults = map[string]string{
	"replica-id": "<hostname>-<pid>",
	"state-dir":  "$XDG_STATE_HOME/kvrouter, else ~/.local/state/kvrouter",
}

// routerMetrics is every kvrouter_ metric family the router registers
// (metricset.All; Go's and the process's are documented as such).
func routerMetrics(t *testing.T) []docgen.Metric {
	t.Helper()
	var out []docgen.Metric
	for _, m := range metricset.All(t) {
		if strings.HasPrefix(m.Name, "kvrouter_") {
			out = append(out, m)
		}
	}
	if len(out) < 40 {
		t.Fatalf("only %d kvrouter metrics found", len(out))
	}
	return out
}

// routerFlags is cmd/router's flag set: --config and --version (its own,
// which cmd/router's TestFlagSetIsApps checks) and the App's.
func routerFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	fs.String("config", "", "YAML config file (flags override it)")
	fs.Bool("version", false, "print the version and exit")
	cfg := app.DefaultConfig()
	cfg.RegisterFlags(fs)
	return fs
}

// TestDocsGenerated: the flag table of docs/configuration.md and the metrics
// reference of docs/operations.md are what the code registers now.
func TestDocsGenerated(t *testing.T) {
	metrics := routerMetrics(t)
	check(t, "configuration.md", "flags", docgen.FlagTable(docgen.Flags(routerFlags(), machineDefaults)))
	check(t, "operations.md", "metrics", docgen.MetricTable(metrics))
}

func check(t *testing.T, file, section, want string) {
	t.Helper()
	path := filepath.Join(docsDir, file)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		out, err := docgen.Splice(string(doc), section, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := docgen.Section(string(doc), section)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("docs/%s's %s table differs from the code; run go generate ./internal/docgen\n%s",
			file, section, lineDiff(got, want))
	}
}

// lineDiff names the rows only one side has.
func lineDiff(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("code only: " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("docs only: " + l + "\n")
		}
	}
	return b.String()
}

// TestDocsDriftDetected: a flag or a metric the documents do not list, and
// a documented one the code no longer has, each make the tables differ.
func TestDocsDriftDetected(t *testing.T) {
	doc := func(file, section string) string {
		b, err := os.ReadFile(filepath.Join(docsDir, file))
		if err != nil {
			t.Fatal(err)
		}
		s, err := docgen.Section(string(b), section)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	flags := docgen.Flags(routerFlags(), machineDefaults)
	extra := append(append([]docgen.Flag(nil), flags...), docgen.Flag{Name: "undocumented", Usage: "new"})
	if docgen.FlagTable(extra) == doc("configuration.md", "flags") {
		t.Error("a flag added undocumented leaves the flag table equal")
	}
	if docgen.FlagTable(flags[1:]) == doc("configuration.md", "flags") {
		t.Error("a documented flag removed from the code leaves the flag table equal")
	}
	metrics := routerMetrics(t)
	more := append(append([]docgen.Metric(nil), metrics...), docgen.Metric{Name: "kvrouter_new_total", Type: "counter"})
	if docgen.MetricTable(more) == doc("operations.md", "metrics") {
		t.Error("a metric added undocumented leaves the metrics table equal")
	}
	if docgen.MetricTable(metrics[1:]) == doc("operations.md", "metrics") {
		t.Error("a documented metric gone from the code leaves the metrics table equal")
	}
}
