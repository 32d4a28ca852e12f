package normalize

import (
	"strings"
	"testing"
)

// TestMapEventKeepsItsTagsFields: a map's keys are decoded before its tag is
// known; the fields that do not belong to the tag are then dropped, and
// their errors ignored.
func TestMapEventKeepsItsTagsFields(t *testing.T) {
	all := `"block_hashes": [1], "parent_block_hash": 9, "token_ids": [[1, 2]], "block_size": 16, "medium": "CPU",
		"lora_name": "l", "extra_keys": [["s"]], "group_idx": 2, "kv_cache_spec_kind": "mamba",
		"kv_cache_spec_sliding_window": 4, "locality": "LOCAL", "cache_salt": "c"`
	var rb rawBatch
	desc := `[1.0, [{` + all + `, "type": "BlockRemoved"}, {` + all + `, "type": "AllBlocksCleared"}, {"type": "BlockRemoved", "token_ids": "bad"}]]`
	if err := decodeBatch(mustDesc(t, desc), &rb); err != nil {
		t.Fatal(err)
	}
	rm := rb.Events[0]
	kept := rm.Err == nil && len(rm.BlockHashes) == 1 && string(rm.Medium) == "CPU" && string(rm.Locality) == "LOCAL" &&
		rm.HasGroup && rm.Group == 2 && rm.HasKind && string(rm.SpecKind) == "mamba"
	dropped := !rm.HasParent && rm.Tokens == nil && !rm.Bigram && rm.BlockSize == -1 && rm.LoRAName == nil &&
		rm.ExtraKeys == nil && !rm.HasWindow && !rm.HasCacheSalt
	if !kept || !dropped {
		t.Errorf("BlockRemoved kept %+v", rm)
	}
	cl := rb.Events[1]
	if cl.Tag != tagCleared || cl.BlockHashes != nil || cl.HasGroup || cl.HasKind || cl.Medium != nil || cl.BlockSize != -1 {
		t.Errorf("AllBlocksCleared kept %+v", cl)
	}
	if rb.Events[2].Err != nil {
		t.Errorf("an error in a field BlockRemoved does not have: %v", rb.Events[2].Err)
	}
}

// TestArrayEventFirstErrorWins: after a field error the rest of the event is
// skipped, but still checked: a structural error there rejects the batch.
func TestArrayEventFirstErrorWins(t *testing.T) {
	var rb rawBatch
	err := decodeBatch(mustDesc(t, `[1.0, [["BlockStored", [1], "p", "t", 16]]]`), &rb)
	if err != nil || rb.Events[0].Err == nil || rb.Events[0].Err.field != "parent_block_hash" {
		t.Fatalf("err %v, event error %v; want parent_block_hash's", err, rb.Events[0].Err)
	}
	err = decodeBatch(mustDesc(t, `[1.0, [["BlockStored", [1], "p", raw(c1)]]]`), &rb)
	if err == nil || !strings.Contains(err.Error(), "invalid msgpack code") {
		t.Errorf("structural error after a field error: %v", err)
	}
}

// TestEventTags: tags are matched exactly; anything else is unknown.
func TestEventTags(t *testing.T) {
	for name, want := range map[string]eventTag{"BlockStored": tagStored, "BlockRemoved": tagRemoved,
		"AllBlocksCleared": tagCleared, "blockstored": tagUnknown, "": tagUnknown, "KVCacheCompacted": tagUnknown} {
		if got := tagOf([]byte(name)); got != want {
			t.Errorf("tagOf(%q) = %v, want %v", name, got, want)
		}
	}
}
