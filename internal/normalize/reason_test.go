package normalize

import (
	"strings"
	"testing"
)

// TestReasonLabels: every reason has its own metric label.
func TestReasonLabels(t *testing.T) {
	seen := map[string]bool{}
	for r := Reason(0); r < NumReasons; r++ {
		s := r.String()
		if s == "" || strings.Contains(s, "Reason(") || seen[s] {
			t.Errorf("reason %d label %q", r, s)
		}
		seen[s] = true
	}
}
