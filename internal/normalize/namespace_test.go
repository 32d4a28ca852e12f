package normalize

import (
	"strings"
	"testing"
)

// TestEventNamespace: cache_salt first (unless empty), else the extra keys'
// salt; Dynamo's prefix is stripped.
func TestEventNamespace(t *testing.T) {
	extra := func(items ...string) []extraKeys {
		var its []extraKey
		for _, s := range items {
			its = append(its, extraKey{Kind: extraStr, Str: []byte(s)})
		}
		return []extraKeys{{Present: true, Items: its}}
	}
	for _, tc := range []struct {
		name string
		ev   rawEvent
		want string
	}{
		{"none", rawEvent{}, ""},
		{"cache_salt", rawEvent{HasCacheSalt: true, CacheSalt: []byte("a"), ExtraKeys: extra("b")}, "a"},
		{"empty cache_salt", rawEvent{HasCacheSalt: true, CacheSalt: []byte{}, ExtraKeys: extra("b")}, "b"},
		{"extra keys after the LoRA name", rawEvent{LoRAName: []byte("l"), ExtraKeys: extra("l", strings.Repeat("f", 64), "b")}, "b"},
		{"Dynamo's prefix", rawEvent{HasCacheSalt: true, CacheSalt: []byte("dynamo-cache-salt:t")}, "t"},
		{"Dynamo's prefix in extra keys", rawEvent{ExtraKeys: extra("dynamo-cache-salt:t")}, "t"},
	} {
		if got := string(eventNamespace(&tc.ev)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestNamespaceStates: a block remembers its namespace; stored again under
// another (or none) it becomes ambiguous, and stays so when removed.
func TestNamespaceStates(t *testing.T) {
	n := New(Config{})
	var b Batch
	a, other := blockNS{hash: 1, ok: true}, blockNS{hash: 2, ok: true}
	n.remember([]uint64{10, 11, 12}, a, &b)
	n.remember([]uint64{11}, other, &b)
	n.remember([]uint64{12}, blockNS{}, &b)
	n.remember([]uint64{10}, a, &b)
	for h, want := range map[uint64]nsState{10: {hash: 1}, 11: {ambiguous: true}, 12: {ambiguous: true}} {
		if got := n.ns[h]; got != want {
			t.Errorf("block %d: %+v, want %+v", h, got, want)
		}
	}
	for _, tc := range []struct {
		parent uint64
		want   blockNS
		ok     bool
	}{{10, a, true}, {11, blockNS{}, false}, {99, blockNS{}, true}} {
		ns, ok := n.namespace(&rawEvent{HasParent: true, Parent: tc.parent})
		if ns != tc.want || ok != tc.ok {
			t.Errorf("child of %d: %+v %v, want %+v %v", tc.parent, ns, ok, tc.want, tc.ok)
		}
	}
	n.forget([]uint64{10, 11})
	if _, ok := n.ns[10]; ok {
		t.Error("removed block 10 still remembered")
	}
	if !n.ns[11].ambiguous {
		t.Error("removed ambiguous block 11 forgotten")
	}
}
