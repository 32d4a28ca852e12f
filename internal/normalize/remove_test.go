package normalize

import (
	"slices"
	"testing"
)

// TestRemoved: a remove names engine blocks, split by the learned engine
// block size; it forgets their namespaces, so that a later unsalted child
// no longer inherits one.
func TestRemoved(t *testing.T) {
	n := New(Config{})
	var b Batch
	p := `[1.0, [["BlockStored", [1], nil, [seq(1, 32)], 32, nil, nil, nil, [["salt"]]],
		["BlockRemoved", [1], "CPU"], ["BlockRemoved", []], ["BlockRemoved", [1], nil, 7]]]`
	if err := n.Normalize(mustDesc(t, p), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 2 || b.Skipped[reasonIgnoredEvent] != 1 || b.Skipped[reasonUnlearnedGroup] != 1 {
		t.Fatalf("events %+v, skipped %v", b.Events, b.Skipped)
	}
	rm := b.Events[1]
	if rm.Kind != KindRemove || rm.Tier != tierOf([]byte("CPU")) || !slices.Equal(rm.EngineHashes, []uint64{splitHash(1, 0), 1}) {
		t.Errorf("remove %+v", rm)
	}
	if n.namespacedBlocks() != 0 {
		t.Errorf("%d namespaces remembered after the remove", n.namespacedBlocks())
	}
}
