package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile = "prometheus/rules.yaml"
	alertsDoc = "../docs/alerts.md"
)

// TestPromtool checks the rules file and runs its unit tests under promtool.
func TestPromtool(t *testing.T) {
	promtool := needTool(t, "promtool", "prometheus")
	tests, err := filepath.Glob("prometheus/tests/*.yaml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no promtool tests under prometheus/tests (%v)", err)
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, append([]string{"test", "rules"}, tests...)} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert       string
			Expr        string
			Labels      map[string]string
			Annotations map[string]string
		}
	}
}

type testFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// alerts reads the rules file's alerts by name.
func alerts(t *testing.T) map[string]map[string]string {
	var rf ruleFile
	readYAML(t, rulesFile, &rf)
	out := map[string]map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert (%q): test it and list it here", g.Name, r.Expr)
				continue
			}
			if _, dup := out[r.Alert]; dup {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("alert %s: severity %q, want page or ticket", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no summary", r.Alert)
			}
			out[r.Alert] = r.Annotations
		}
	}
	if len(out) == 0 {
		t.Fatal("no alerts in " + rulesFile)
	}
	return out
}

// TestEveryAlertTestedAndDocumented checks that each alert has a promtool
// test case that fires it and one that expects it quiet, and a section of
// docs/alerts.md, which its runbook annotation names.
func TestEveryAlertTestedAndDocumented(t *testing.T) {
	as := alerts(t)
	fired, quiet := map[string]bool{}, map[string]bool{}
	paths, _ := filepath.Glob("prometheus/tests/*.yaml")
	for _, p := range paths {
		var tf testFile
		readYAML(t, p, &tf)
		if !slices.Contains(tf.RuleFiles, "../rules.yaml") {
			t.Errorf("%s does not load ../rules.yaml", p)
		}
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				if _, ok := as[a.Alertname]; !ok {
					t.Errorf("%s tests %s, which the rules do not define", p, a.Alertname)
				}
				if len(a.ExpAlerts) == 0 {
					quiet[a.Alertname] = true
				} else {
					fired[a.Alertname] = true
				}
				for _, e := range a.ExpAlerts {
					if e.ExpAnnotations == nil {
						t.Errorf("%s: a firing %s without exp_annotations: its templates go untested", p, a.Alertname)
					}
				}
			}
		}
	}
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (\w+)`).FindAllStringSubmatch(string(doc), -1) {
		headings[m[1]] = true
	}
	for name, ann := range as {
		if !fired[name] {
			t.Errorf("alert %s: no promtool test fires it", name)
		}
		if !quiet[name] {
			t.Errorf("alert %s: no promtool test expects it quiet", name)
		}
		if !headings[name] {
			t.Errorf("alert %s: no \"### %s\" section in docs/alerts.md", name, name)
		}
		if want := "docs/alerts.md#" + strings.ToLower(name); ann["runbook"] != want {
			t.Errorf("alert %s: runbook %q, want %q", name, ann["runbook"], want)
		}
	}
	for h := range headings {
		if _, ok := as[h]; !ok && strings.HasPrefix(h, "Kvrouter") {
			t.Errorf("docs/alerts.md documents %s, which the rules do not define", h)
		}
	}
}
