package status

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	src := SourceFunc(func() []Rank {
		return []Rank{
			{Worker: "w1", DPRank: 0, CachedBlocks: 120, CapacityBlocks: 4096},
			{Worker: "w1", DPRank: 1, CachedBlocks: 7},
		}
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(src))
	want := `
# HELP kvrouter_rank_cached_blocks Blocks the index holds for a worker/rank.
# TYPE kvrouter_rank_cached_blocks gauge
kvrouter_rank_cached_blocks{dp_rank="0",worker="w1"} 120
kvrouter_rank_cached_blocks{dp_rank="1",worker="w1"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
