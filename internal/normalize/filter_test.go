package normalize

import "testing"

// TestClassify: kinds are matched in any case; anything unlisted is unknown.
func TestClassify(t *testing.T) {
	for kind, want := range map[string]kindClass{
		"full_attention": kindMain, "MLA_Attention": kindMain, "sink_full_attention": kindMain,
		"sliding_window": kindNonMain, "mamba": kindNonMain, "cross_attention": kindNonMain,
		"quantum_attention": kindUnknown, "": kindUnknown,
	} {
		if got := classify([]byte(kind)); got != want {
			t.Errorf("classify(%q) = %d, want %d", kind, got, want)
		}
	}
}

// TestFilter: an event's own kind decides over its group; a group without a
// kind uses what was learned; unlearned group 0 passes; REMOTE blocks are
// not on this worker.
func TestFilter(t *testing.T) {
	n := New(Config{})
	n.learn(&rawEvent{HasGroup: true, Group: 1, HasKind: true, SpecKind: []byte("sliding_window")})
	n.learn(&rawEvent{HasGroup: true, Group: 2, HasKind: true, SpecKind: []byte("odd")})
	n.learn(&rawEvent{HasGroup: true, Group: 3, HasKind: true, SpecKind: []byte("full_attention")})
	for _, tc := range []struct {
		name string
		ev   rawEvent
		want Reason // NumReasons: kept
	}{
		{"no metadata", rawEvent{}, NumReasons},
		{"main kind on a non-main group", rawEvent{HasGroup: true, Group: 1, HasKind: true, SpecKind: []byte("full_attention")}, NumReasons},
		{"non-main kind", rawEvent{HasKind: true, SpecKind: []byte("mamba")}, reasonNonMainAttentionKind},
		{"unknown kind", rawEvent{HasKind: true, SpecKind: []byte("odd")}, reasonUnknownKind},
		{"learned non-main group", rawEvent{HasGroup: true, Group: 1}, reasonNonMainAttentionGroup},
		{"learned unknown group", rawEvent{HasGroup: true, Group: 2}, reasonUnknownKind},
		{"learned main group", rawEvent{HasGroup: true, Group: 3}, NumReasons},
		{"unlearned group 0", rawEvent{HasGroup: true, Group: 0}, NumReasons},
		{"unlearned group 4", rawEvent{HasGroup: true, Group: 4}, reasonUnlearnedGroup},
		{"remote", rawEvent{Locality: []byte("remote")}, reasonRemoteLocality},
		{"local", rawEvent{Locality: []byte("LOCAL")}, NumReasons},
	} {
		got := NumReasons
		if r, drop := n.filter(&tc.ev); drop {
			got = r
		}
		if got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLearnBounded: group indexes come off the wire; at most maxGroups are
// learned, and known groups can still be relearned.
func TestLearnBounded(t *testing.T) {
	n := New(Config{})
	for g := uint32(0); g < maxGroups+10; g++ {
		n.learn(&rawEvent{HasGroup: true, Group: g, HasKind: true, SpecKind: []byte("full_attention")})
	}
	if len(n.groups) != maxGroups {
		t.Fatalf("%d groups learned, want %d", len(n.groups), maxGroups)
	}
	n.learn(&rawEvent{HasGroup: true, Group: 5, HasKind: true, SpecKind: []byte("mamba")})
	if n.groups[5] != kindNonMain {
		t.Error("a known group was not relearned at the bound")
	}
}
