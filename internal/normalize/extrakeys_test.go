package normalize

import (
	"slices"
	"strings"
	"testing"
)

// TestExtraKeyItems: each item keeps its kind; shapes the normalizer does
// not use become extraOther, without failing the event.
func TestExtraKeyItems(t *testing.T) {
	var rb rawBatch
	ev := decodeOne(t, &rb, `["BlockStored", [1, 2, 3], nil, [], 16, nil, nil, nil,
		[["s", bin(6869), -5, ["img", 3], [bin(6a6b), 4], ["a", "b"], [1, 2, 3], {"k": 1}, nil], nil, []]]`)
	if ev.Err != nil || len(ev.ExtraKeys) != 3 {
		t.Fatalf("extra keys %+v, error %v", ev.ExtraKeys, ev.Err)
	}
	var got []string
	for _, it := range ev.ExtraKeys[0].Items {
		got = append(got, fmtItem(it))
	}
	want := []string{"str:s", "bytes:hi", "int:-5", "pair:img@3", "pair:jk@4", "other", "other", "other", "other"}
	if !slices.Equal(got, want) {
		t.Errorf("items %q, want %q", got, want)
	}
	if ev.ExtraKeys[1].Present || !ev.ExtraKeys[2].Present || len(ev.ExtraKeys[2].Items) != 0 {
		t.Errorf("nil and empty blocks: %+v", ev.ExtraKeys[1:])
	}
	ev = decodeOne(t, &rb, `["BlockStored", [1], nil, [], 16, nil, nil, nil, []]`)
	if ev.ExtraKeys == nil || len(ev.ExtraKeys) != 0 {
		t.Errorf("an empty list is present: %#v", ev.ExtraKeys)
	}
}

func fmtItem(it extraKey) string {
	switch it.Kind {
	case extraStr:
		return "str:" + string(it.Str)
	case extraBytes:
		return "bytes:" + string(it.Str)
	case extraInt:
		return "int:" + itoa(it.Int)
	case extraPair:
		return "pair:" + string(it.Str) + "@" + itoa(it.Int)
	}
	return "other"
}

// TestExtraKeysSalt: the salt is the first block's first string that is
// neither the LoRA name nor a multimodal hash.
func TestExtraKeysSalt(t *testing.T) {
	mm := strings.Repeat("ab", 32)
	for desc, want := range map[string]string{
		`["l", "` + mm + `", ["img", 1], "salt", "later"], ["other"]`: "salt",
		`["l", "` + mm + `"], ["salt"]`:                               "",
		`nil, ["salt"]`:                                               "",
		`[bin(73), 5, "salt"]`:                                        "salt",
	} {
		var rb rawBatch
		ev := decodeOne(t, &rb, `["BlockStored", [1, 2], nil, [], 16, nil, nil, "l", [`+desc+`]]`)
		if got := string(extraKeysSalt(ev)); got != want {
			t.Errorf("%s: salt %q, want %q", desc, got, want)
		}
	}
}

// TestAppendBlockMM: a block's multimodal hashes are its 64-hex-digit
// strings and its pairs' identifiers, in order.
func TestAppendBlockMM(t *testing.T) {
	hexID := "0123456789abcdef" + strings.Repeat("0", 48)
	var rb rawBatch
	ev := decodeOne(t, &rb, `["BlockStored", [1, 2], nil, [], 16, nil, nil, nil, [["salt", "`+hexID+`", ["img-77", 20], bin(00)], nil]]`)
	if got, want := appendBlockMM(nil, ev, 0), []uint64{0x0123456789abcdef, MMHash("img-77")}; !slices.Equal(got, want) {
		t.Errorf("block 0: %x, want %x", got, want)
	}
	if got := appendBlockMM([]uint64{9}, ev, 1); !slices.Equal(got, []uint64{9}) {
		t.Errorf("nil block: %x", got)
	}
	if got := appendBlockMM(nil, ev, 5); got != nil {
		t.Errorf("block past the list: %x", got)
	}
}
