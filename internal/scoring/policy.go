package scoring

import "fmt"

// Policy names a cost function.
type Policy string

const (
	// PolicyTime costs a candidate in seconds: the request's expected time
	// to first token there plus the prefill time the choice costs the fleet
	// (see timeCoster). The default.
	PolicyTime Policy = "time"
	// PolicyBlocks is the cost in blocks:
	// PrefillWeight x (prompt blocks - overlap credit + active prefill
	// blocks) + active decode blocks.
	PolicyBlocks Policy = "blocks"
)

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyTime, PolicyBlocks:
		return p, nil
	}
	return "", fmt.Errorf("scoring: policy %q: want %s or %s", s, PolicyTime, PolicyBlocks)
}
