package kv

// Tier is the storage tier a block copy resides on. One block can sit on
// several tiers of one worker at once.
type Tier uint8

// Storage tiers, best first.
const (
	TierDevice Tier = iota
	TierHost
	TierDisk
	TierExternal
	// NumTiers is the number of tiers.
	NumTiers
)

var tierNames = [NumTiers]string{"device", "host", "disk", "external"}

// String names the tier as the README and metrics do.
func (t Tier) String() string {
	if t < NumTiers {
		return tierNames[t]
	}
	return "tier(" + itoa(uint64(t)) + ")"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
