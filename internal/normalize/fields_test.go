package normalize

import (
	"fmt"
	"slices"
	"testing"
)

// decodeOne decodes a one-event array batch and returns the event.
func decodeOne(t *testing.T, rb *rawBatch, event string) *rawEvent {
	t.Helper()
	if err := decodeBatch(mustDesc(t, "[1.0, ["+event+"]]"), rb); err != nil {
		t.Fatal(err)
	}
	return &rb.Events[0]
}

// TestTokenEncodings: token ids decode the same in every integer encoding,
// inside the fast paths or not; ids outside [0, 2^32) are errors.
func TestTokenEncodings(t *testing.T) {
	var rb rawBatch
	ev := decodeOne(t, &rb, `["BlockStored", [1], nil, [0, 127, u8(128), u16(300), u32(70000), u64(4294967295), i8(5), i16(6), i32(7), i64(8)]]`)
	if want := []uint32{0, 127, 128, 300, 70000, 4294967295, 5, 6, 7, 8}; ev.Err != nil || !slices.Equal(ev.Tokens, want) || ev.Bigram {
		t.Errorf("tokens %v (err %v), want %v", ev.Tokens, ev.Err, want)
	}
	for _, tok := range []string{"-1", "4294967296", `"7"`, "1.5"} {
		ev := decodeOne(t, &rb, fmt.Sprintf(`["BlockStored", [1], nil, [1, %s]]`, tok))
		if ev.Err == nil || ev.Err.field != "token_ids" {
			t.Errorf("token %s: error %v", tok, ev.Err)
		}
	}
	ev = decodeOne(t, &rb, `["BlockStored", [1], nil, [[1, 2], [2, 3], [3, 9]]]`)
	if want := []uint32{1, 2, 3, 9}; !slices.Equal(ev.Tokens, want) || !ev.Bigram {
		t.Errorf("bigrams: %v %v, want %v", ev.Tokens, ev.Bigram, want)
	}
}

// TestHashEncodings: a hash is its integer's 64 bits, or the last 8 bytes of
// a binary, big-endian and left-padded.
func TestHashEncodings(t *testing.T) {
	var rb rawBatch
	ev := decodeOne(t, &rb, `["BlockStored", [1, u64(0xffffffffffffffff), i64(-2), i8(-3), bin(), bin(0102), bin(00000000000000000000000000000000 0102030405060708)], bin(ff)]`)
	want := []uint64{1, 1<<64 - 1, 1<<64 - 2, 1<<64 - 3, 0, 0x0102, 0x0102030405060708}
	if ev.Err != nil || !slices.Equal(ev.BlockHashes, want) || !ev.HasParent || ev.Parent != 0xff {
		t.Errorf("hashes %x parent %x (err %v), want %x parent ff", ev.BlockHashes, ev.Parent, ev.Err, want)
	}
	for _, h := range []string{`"1"`, "1.0", "[1]"} {
		if ev := decodeOne(t, &rb, `["BlockStored", [`+h+`]]`); ev.Err == nil || ev.Err.field != "block_hashes" {
			t.Errorf("hash %s: error %v", h, ev.Err)
		}
	}
}

// TestLoRASlotSalt: lora_name is a name, or (SGLang arrays) a map whose last
// "cache_salt" is the salt.
func TestLoRASlotSalt(t *testing.T) {
	var rb rawBatch
	ev := decodeOne(t, &rb, `["BlockStored", [1], nil, [], 16, nil, nil, "adapter"]`)
	if string(ev.LoRAName) != "adapter" || ev.HasCacheSalt {
		t.Errorf("name: %q %v", ev.LoRAName, ev.HasCacheSalt)
	}
	ev = decodeOne(t, &rb, `["BlockStored", [1], nil, [], 16, nil, nil, {"x": 1, "cache_salt": "a", "cache_salt": "b"}]`)
	if ev.LoRAName != nil || !ev.HasCacheSalt || string(ev.CacheSalt) != "b" {
		t.Errorf("salt map: %q %v %q", ev.LoRAName, ev.HasCacheSalt, ev.CacheSalt)
	}
	ev = decodeOne(t, &rb, `["BlockStored", [1], nil, [], 16, nil, nil, {"cache_salt": 5}]`)
	if ev.Err == nil || ev.Err.field != "lora_name" {
		t.Errorf("salt map with an int salt: error %v", ev.Err)
	}
}

// TestOptionalFields: nil means absent; 0 is not a block size.
func TestOptionalFields(t *testing.T) {
	var rb rawBatch
	ev := decodeOne(t, &rb, `["BlockStored", [1], nil, nil, nil, "any", nil, nil, nil, nil, nil, nil, nil]`)
	if ev.Err != nil || ev.HasParent || ev.Tokens != nil || ev.BlockSize != -1 || ev.ExtraKeys != nil || ev.HasGroup || ev.HasKind || ev.HasWindow {
		t.Errorf("nils: %+v", ev)
	}
	ev = decodeOne(t, &rb, `["BlockStored", [1], nil, [], 16, nil, nil, nil, nil, 3, "full_attention", -4, "LOCAL"]`)
	if ev.Err != nil || !ev.HasGroup || ev.Group != 3 || !ev.HasWindow || ev.SlidingWindow != -4 || string(ev.Locality) != "LOCAL" {
		t.Errorf("values: %+v", ev)
	}
	for desc, field := range map[string]string{
		`["BlockStored", [1], nil, [], 0]`:                                      "block_size",
		`["BlockStored", [1], nil, [], 2147483648]`:                             "block_size",
		`["BlockStored", [1], nil, [], 16, nil, nil, nil, nil, 4294967296]`:     "group_idx",
		`["BlockStored", [1], nil, [], 16, nil, nil, nil, nil, 0, nil, "4"]`:    "kv_cache_spec_sliding_window",
		`["BlockStored", [1], nil, [], 16, nil, nil, nil, nil, 0, nil, nil, 1]`: "locality",
		`["BlockRemoved", [1], 5]`:                                              "medium",
	} {
		if ev := decodeOne(t, &rb, desc); ev.Err == nil || ev.Err.field != field {
			t.Errorf("%s: error %v, want one in %s", desc, ev.Err, field)
		}
	}
}
