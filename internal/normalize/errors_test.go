package normalize

import (
	"strings"
	"testing"
)

// TestDecodeErrorsName: every batch-level error says where.
func TestDecodeErrorsName(t *testing.T) {
	var rb rawBatch
	err := decodeBatch(mustDesc(t, `[1.0, [["BlockStored", [1]]], 0]`)[:10], &rb)
	if err == nil || !strings.Contains(err.Error(), "at byte") {
		t.Fatalf("error %v does not name an offset", err)
	}
	if !strings.HasPrefix(err.Error(), "decode batch: ") {
		t.Errorf("error %v", err)
	}
}

// TestErrorMessages: the parts an error does not know are left out.
func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&decodeError{offset: -1, msg: "m"}, "decode batch: m"},
		{&decodeError{offset: 3, field: "ts", msg: "m"}, "decode batch: ts: m at byte 3"},
		{&eventError{index: 2, offset: -1, msg: "m"}, "event 2: m"},
		{&eventError{index: 2, tag: "BlockStored", field: "token_ids", offset: 9, msg: "m"}, "event 2 (BlockStored): token_ids: m at byte 9"},
		{batchErr("events", &typeError{4, "array", mStr}), "decode batch: events: want array, got str at byte 4"},
		{eventErr(1, &rawEvent{Name: []byte("BlockRemoved")}, fMedium, &valueError{7, "bad"}), "event 1 (BlockRemoved): medium: bad at byte 7"},
		{eventErr(1, &rawEvent{}, noField, &typeError{5, "array or map event", mNil}), "event 1: want array or map event, got nil at byte 5"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
