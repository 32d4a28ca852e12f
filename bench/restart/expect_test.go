package restart

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/bench/replay"
)

// TestRankExpect checks the expectation model: which restore outcomes are
// right for a rank, from its buffer and the batches its engine published
// around the kill, and when it must then match its engine exactly.
func TestRankExpect(t *testing.T) {
	for _, c := range []struct {
		name  string
		x     RankExpect
		want  []string
		str   string
		exact map[string]bool // restore outcome -> mustExact
	}{
		{
			name: "buffer covers the window",
			x:    RankExpect{Buffer: 100, Down: 30, Window: 80, Total: 500},
			want: []string{replay.RestoreRestored}, str: "restored",
			exact: map[string]bool{replay.RestoreRestored: true, replay.RestoreRebuilt: true, "": true},
		},
		{
			name: "buffer covers the whole history",
			x:    RankExpect{Buffer: 100, Down: 30, Window: 300, Total: 90},
			want: []string{replay.RestoreRestored}, str: "restored",
			exact: map[string]bool{replay.RestoreRebuilt: true},
		},
		{
			name: "downtime outran the buffer",
			x:    RankExpect{Buffer: 8, Down: 40, Window: 90, Total: 500},
			want: []string{replay.RestoreRebuilt}, str: "rebuilt",
			exact: map[string]bool{replay.RestoreRebuilt: false, replay.RestoreRestored: false, "": false},
		},
		{
			name: "ambiguous: the buffer may or may not reach the snapshot",
			x:    RankExpect{Buffer: 50, Down: 30, Window: 80, Total: 500},
			want: []string{replay.RestoreRestored, replay.RestoreRebuilt}, str: "restored|rebuilt",
			exact: map[string]bool{replay.RestoreRestored: true, "": true, replay.RestoreRebuilt: false},
		},
		{
			name: "engine restarted while the router was down",
			x:    RankExpect{Buffer: 8, Down: 40, Window: 40, Total: 40, Reset: true},
			want: []string{replay.RestoreReset}, str: "reset",
			exact: map[string]bool{replay.RestoreReset: true, replay.RestoreRebuilt: true},
		},
		{
			name: "fresh: nothing published as of the last snapshot",
			x:    RankExpect{Buffer: 100, Down: 10, Window: 20, Total: 20, Fresh: true},
			want: []string{replay.RestoreRestored, ""}, str: "restored|none",
			exact: map[string]bool{"": true},
		},
		{
			name: "fresh and reset: the new process's stream only",
			x:    RankExpect{Buffer: 100, Down: 10, Window: 10, Total: 10, Fresh: true, Reset: true},
			want: []string{replay.RestoreReset}, str: "reset",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why := c.x.want()
			if !slices.Equal(got, c.want) {
				t.Errorf("want() = %q, want %q", got, c.want)
			}
			if why == "" {
				t.Error("want() gave no reason")
			}
			if s := c.x.String(); s != c.str {
				t.Errorf("String() = %q, want %q", s, c.str)
			}
			for restore, want := range c.exact {
				if got := c.x.mustExact(restore); got != want {
					t.Errorf("mustExact(%q) = %v, want %v", restore, got, want)
				}
			}
		})
	}
}

// TestExpectations checks how the engines' seqs two snapshot intervals
// before the kill, at the kill and at the restart become each rank's
// expectation: engine 0 gets the short buffer, engine 1 the restarted
// stream when the run restarts it, and a rank silent before the snapshot
// is fresh.
func TestExpectations(t *testing.T) {
	r := &run{cfg: Config{Engines: 3, Buffer: 1000, ShortBuffer: 16, RestartEng: true}}
	got := r.expectations([]uint64{50, 40, 0}, []uint64{100, 90, 20}, []uint64{300, 25, 60})
	want := []RankExpect{
		{Buffer: 16, Down: 200, Window: 250, Total: 300},
		{Buffer: 1000, Down: 25, Window: 25, Total: 25, Reset: true},
		{Buffer: 1000, Down: 40, Window: 60, Total: 60, Fresh: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("expectations:\n got %+v\nwant %+v", got, want)
	}
	if !got[0].mustRebuild() {
		t.Error("engine 0 published 200 batches past a 16-batch buffer: it must be rebuilt")
	}
}
