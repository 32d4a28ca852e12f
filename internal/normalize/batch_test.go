package normalize

import "testing"

// TestBatchReuse: normalizing into a Batch reuses its memory without
// corrupting the events of the current batch.
func TestBatchReuse(t *testing.T) {
	n := New(Config{})
	var b Batch
	big := mustDesc(t, `[1.0, [["BlockStored", [1, 2, 3, 4], nil, [seq(1, 64)], 16], ["BlockRemoved", [9, 8]]], 0]`)
	small := mustDesc(t, `[2.0, [["BlockStored", [5], nil, [seq(1, 16)], 16]], 0]`)
	for _, p := range [][]byte{big, small, big} {
		if err := n.Normalize(p, &b); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.Events) != 2 || len(b.Events[0].Blocks) != 4 || b.Events[0].Blocks[3].EngineHash != 4 ||
		b.Events[1].EngineHashes[1] != 8 || b.TS != 1.0 {
		t.Fatalf("reused batch: %+v", b.Events)
	}
	if b.Events[0].Blocks[0].BlockHash != BlockHash(Seed("", ""), seqTokens(1, 16), nil) {
		t.Error("block hash")
	}
}
