package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

const dashboardFile = "grafana/kvrouter.json"

type dashboard struct {
	Title      string
	UID        string
	Panels     []panel
	Templating struct {
		List []struct {
			Name  string
			Type  string
			Query any
		}
	}
}

type panel struct {
	ID          int
	Type        string
	Title       string
	Description string
	Datasource  map[string]string
	GridPos     struct{ H, W, X, Y int }
	Targets     []struct {
		Expr  string
		RefID string
	}
	Panels []panel // a collapsed row's
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)

// TestDashboardQueries checks that the dashboard parses, that its panels are
// laid out and have queries, and that every query and variable names only
// metrics kvrouter exports (built from the router's own components), the
// pending ones, or the vLLM metrics it cites.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	known, _ := knownMetrics(t)
	check := func(where, expr string, names []string) {
		t.Helper()
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, expr)
		}
		for _, n := range names {
			if !known[n] {
				t.Errorf("%s: %q names %s, which neither kvrouter nor a cited engine exports", where, expr, n)
			}
		}
	}
	ids := map[int]bool{}
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: grid position %+v", p.Title, p.GridPos)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 || p.Description == "" || p.Datasource["uid"] == "" {
				t.Errorf("panel %q: want targets, a description and a datasource", p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				check("panel "+p.Title+" "+tg.RefID, tg.Expr, metricNames(tg.Expr))
			}
		}
	}
	walk(d.Panels)
	if queries < 20 {
		t.Errorf("only %d queries: the dashboard did not parse as expected", queries)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		qs, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(qs)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, qs)
			continue
		}
		check("variable "+v.Name, qs, []string{m[1]})
	}
}

// TestRuleQueries checks the alert rules the same way.
func TestRuleQueries(t *testing.T) {
	var rf ruleFile
	readYAML(t, rulesFile, &rf)
	known, _ := knownMetrics(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			names := metricNames(r.Expr)
			if len(names) == 0 {
				t.Errorf("alert %s: %q names no metric", r.Alert, r.Expr)
			}
			for _, n := range names {
				if !known[n] {
					t.Errorf("alert %s: %q names %s, which kvrouter does not export", r.Alert, strings.TrimSpace(r.Expr), n)
				}
			}
		}
	}
}
