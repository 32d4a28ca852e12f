package deploy_test

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

var (
	stringLit = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchers  = regexp.MustCompile(`\{[^{}]*\}`)
	ranges    = regexp.MustCompile(`\[[^\[\]]*\]`)
	grouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	ident     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords  = map[string]bool{"bool": true, "offset": true, "and": true, "or": true, "unless": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true}
)

// metricNames returns the metric names a PromQL expression (with Grafana's
// $variables) selects: the identifiers left once strings, label matchers,
// ranges and grouping clauses are gone, less function and aggregation
// names (followed by a parenthesis), keywords, numbers and $variables.
func metricNames(expr string) []string {
	s := stringLit.ReplaceAllString(expr, `""`)
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("0123456789.$", rune(s[loc[0]-1])) {
			continue // a number's exponent or unit, or a variable
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || keywords[name] {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up == 0`, []string{"up"}},
		{`sum by (job, le) (rate(a_bucket{method=~"/x.Y/Route(Stream)?", b="c{d}"}[5m] offset 1h)) > 1e-3`, []string{"a_bucket"}},
		{`histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{job=~"$engine_job"}[$__rate_interval])))`,
			[]string{"vllm:time_to_first_token_seconds_bucket"}},
		{`(x - y) * $block_size / avg(z)`, []string{"x", "y", "z"}},
		{`a > bool 0 unless on (instance) group_left (version) b or c and ignoring (r) d`, []string{"a", "b", "c", "d"}},
		{`time() - (t > 0)`, []string{"t"}},
		{`sum without (result) (increase(w{result="error"}[15m])) > 0`, []string{"w"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
