package normalize

import "testing"

// TestDecodeBatchAllocs: once a rawBatch's memory has grown, decoding the
// benchmark mix into it allocates nothing.
func TestDecodeBatchAllocs(t *testing.T) {
	w := newBenchWorkload(16)
	var rb rawBatch
	pass := func() {
		for _, p := range w.payloads {
			if err := decodeBatch(p, &rb); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass()
	if a := testing.AllocsPerRun(5, pass); a != 0 {
		t.Errorf("%v allocations per pass, want 0", a)
	}
}

// TestDecodeBatchForms: the outer batch as an array or a map decodes to the
// same batch; a map's keys come in any order.
func TestDecodeBatchForms(t *testing.T) {
	events := `[["BlockRemoved", [7]]]`
	for _, desc := range []string{
		`[2.5, ` + events + `, 3]`,
		`[2.5, ` + events + `, 3, "ignored"]`,
		`{"ts": 2.5, "events": ` + events + `, "data_parallel_rank": 3}`,
		`{"attn_dp_rank": 3, "events": ` + events + `, "ts": 2.5}`,
		`{"data_parallel_rank": nil, "attn_dp_rank": 3, "events": ` + events + `, "ts": 2.5, "other": [1]}`,
	} {
		var rb rawBatch
		if err := decodeBatch(mustDesc(t, desc), &rb); err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		if rb.TS != 2.5 || rb.DPRank != 3 || len(rb.Events) != 1 || rb.Events[0].BlockHashes[0] != 7 {
			t.Errorf("%s: ts %v rank %d events %+v", desc, rb.TS, rb.DPRank, rb.Events)
		}
	}
}

// TestDecodeBatchErrorEmpties: a rejected payload leaves no events behind,
// even after a good one was decoded into the same rawBatch.
func TestDecodeBatchErrorEmpties(t *testing.T) {
	var rb rawBatch
	if err := decodeBatch(mustDesc(t, `[1.0, [["AllBlocksCleared"]], 0]`), &rb); err != nil {
		t.Fatal(err)
	}
	if err := decodeBatch(mustDesc(t, `[1.0, [["AllBlocksCleared"]], "rank"]`), &rb); err == nil {
		t.Fatal("bad rank accepted")
	}
	if len(rb.Events) != 0 || rb.DPRank != -1 || rb.TS != 0 {
		t.Errorf("after an error: ts %v rank %d %d events", rb.TS, rb.DPRank, len(rb.Events))
	}
}
