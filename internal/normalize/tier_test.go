package normalize

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestTierOf: engines' media, in any case, map to tiers; unknown ones to the device.
func TestTierOf(t *testing.T) {
	for m, want := range map[string]kv.Tier{
		"": kv.TierDevice, "GPU": kv.TierDevice, "DEVICE": kv.TierDevice, "gpu": kv.TierDevice,
		"CPU": kv.TierHost, "CPU_PINNED": kv.TierHost, "CPU_TIER1": kv.TierHost,
		"CPU_TIER2": kv.TierDisk, "DISK": kv.TierDisk, "NVME": kv.TierDisk, "STORAGE": kv.TierDisk,
		"EXTERNAL": kv.TierExternal, "NETWORK": kv.TierExternal, "REMOTE": kv.TierExternal, "SHARED": kv.TierExternal,
		"TAPE": kv.TierDevice,
	} {
		if got := tierOf([]byte(m)); got != want {
			t.Errorf("tierOf(%q) = %d, want %d", m, got, want)
		}
	}
}
