package normalize

import (
	"slices"
	"strings"
	"testing"
)

// TestSplitExpansionBounded: an engine block size that is a huge multiple of
// the router's turns every hash of a tier-only store or a remove into that
// many router hashes; a few bytes of payload must not become gigabytes. An
// expansion beyond maxExpandedHashes per batch skips the event as malformed.
func TestSplitExpansionBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string
		want    Kind // the last event's kind when accepted; 0: skipped as malformed
		hashes  int  // its engine hashes when accepted
	}{
		{name: "tier-only store, realistic split",
			payload: `[1.0, [{"type": "BlockStored", "block_hashes": [1, 2], "token_ids": [], "block_size": 64, "medium": "CPU"}], 0]`,
			want:    KindStoreTier, hashes: 8},
		{name: "tier-only store, huge block size",
			payload: `[1.0, [{"type": "BlockStored", "block_hashes": [1], "token_ids": [], "block_size": 33554432, "medium": "CPU"}], 0]`},
		{name: "remove after learning a huge block size",
			payload: `[1.0, [["BlockStored", [1], nil, [seq(1, 65536)], 65536], ["BlockRemoved", [seq(2, 300)]]], 0]`},
		{name: "remove after learning a realistic block size",
			payload: `[1.0, [["BlockStored", [1], nil, [seq(1, 64)], 64], ["BlockRemoved", [seq(2, 300)]]], 0]`,
			want:    KindRemove, hashes: 1200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := New(Config{})
			var b Batch
			if err := n.Normalize(mustDesc(t, tc.payload), &b); err != nil {
				t.Fatal(err)
			}
			if tc.want == 0 {
				if b.Skipped[reasonMalformedEvent] != 1 || len(b.Errors) != 1 {
					t.Fatalf("skipped %v, errors %v: want the expansion skipped as malformed", b.Skipped, b.Errors)
				}
				if !strings.Contains(b.Errors[0].Error(), "router blocks") {
					t.Errorf("error %q does not say why", b.Errors[0])
				}
				for _, ev := range b.Events {
					if ev.Kind == KindStoreTier || ev.Kind == KindRemove {
						t.Fatalf("expansion emitted: %d hashes", len(ev.EngineHashes))
					}
				}
				return
			}
			ev := b.Events[len(b.Events)-1]
			if ev.Kind != tc.want || len(ev.EngineHashes) != tc.hashes || len(b.Errors) != 0 {
				t.Fatalf("event %v with %d hashes, errors %v; want %v with %d", ev.Kind, len(ev.EngineHashes), b.Errors, tc.want, tc.hashes)
			}
		})
	}
}

// TestSplitHashes: an engine block split k ways names k distinct hashes, the
// engine's own last, the same way for stores, tier-only stores and removes.
func TestSplitHashes(t *testing.T) {
	n := New(Config{BlockSize: 16})
	for bs, want := range map[int]int{0: 1, 16: 1, 64: 4} {
		if k, ok := n.splitFactor(bs); !ok || k != want {
			t.Errorf("splitFactor(%d) = %d, %v; want %d", bs, k, ok, want)
		}
	}
	if _, ok := n.splitFactor(24); ok {
		t.Error("24 is not a multiple of 16")
	}
	got := appendExpanded(nil, []uint64{7, 8}, 3)
	want := []uint64{splitHash(7, 0), splitHash(7, 1), 7, splitHash(8, 0), splitHash(8, 1), 8}
	if !slices.Equal(got, want) {
		t.Fatalf("expanded %x, want %x", got, want)
	}
	seen := map[uint64]bool{}
	for _, h := range got {
		if seen[h] {
			t.Errorf("hash %x repeats", h)
		}
		seen[h] = true
	}
}
