package persist

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/state"
)

// TestSnapshotStream: a snapshot written to a stream reads back into the
// same index and positions; a damaged or truncated stream is refused.
func TestSnapshotStream(t *testing.T) {
	ranks, ix, cp := snapshotFixture(t)
	var buf bytes.Buffer
	counts, err := WriteSnapshot(&buf, ix, cp, 1)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Ranks != 4 {
		t.Fatalf("snapshot of %d ranks, want 4", counts.Ranks)
	}
	res, err := ReadSnapshot(bytes.NewReader(buf.Bytes()), testIndex)
	if err != nil {
		t.Fatal(err)
	}
	sameIndex(t, ix, res.Index, ranks)
	if p := res.Positions[kv.WorkerRank{ID: "a"}]; p.Seq != 41 || p.Epoch != "e1" {
		t.Fatalf("position of a = %+v", p)
	}
	if res.Snapshot.Counts != counts {
		t.Fatalf("read counts %+v, wrote %+v", res.Snapshot.Counts, counts)
	}

	bad := bytes.Clone(buf.Bytes())
	bad[len(bad)/2] ^= 0x40
	for name, b := range map[string][]byte{"flipped": bad, "truncated": buf.Bytes()[:buf.Len()-9], "empty": nil} {
		if _, err := ReadSnapshot(bytes.NewReader(b), testIndex); !state.IsBadFile(err) && !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("%s stream: %v; want it refused as bad", name, err)
		}
	}
}
