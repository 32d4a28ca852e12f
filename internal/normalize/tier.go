package normalize

import (
	"bytes"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// tierOf maps a storage medium, as engines name it (in any case), to a tier;
// nil and unknown media are the device.
func tierOf(m []byte) kv.Tier {
	switch {
	case len(m) == 0:
		return kv.TierDevice
	case eqAny(m, "GPU", "DEVICE"):
		return kv.TierDevice
	case eqAny(m, "CPU", "CPU_PINNED", "CPU_TIER1"):
		return kv.TierHost
	case eqAny(m, "CPU_TIER2", "DISK", "NVME", "STORAGE"):
		return kv.TierDisk
	case eqAny(m, "EXTERNAL", "NETWORK", "REMOTE", "SHARED"):
		return kv.TierExternal
	}
	return kv.TierDevice
}

func eqAny(m []byte, names ...string) bool {
	for _, s := range names {
		if bytes.EqualFold(m, []byte(s)) {
			return true
		}
	}
	return false
}
