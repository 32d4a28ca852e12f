package state

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// FuzzSnapshotReader: any input either reads whole, and then writes back
// to the same records, or fails as a bad file; it never panics. The seed
// corpus (testdata/fuzz/FuzzSnapshotReader) holds valid snapshots, cut and
// flipped ones and a future version.
func FuzzSnapshotReader(f *testing.F) {
	for seed := range uint64(4) {
		f.Add(encode(f, genSnap(rand.New(rand.NewPCG(seed, 1)), 3, 10, 20)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
	})
}

// checkDecode reads b: it is whole, and then it writes back to the same
// records, or fails as a bad file.
func checkDecode(t *testing.T, b []byte) {
	s, c, err := decode(b)
	if err != nil {
		if !IsBadFile(err) {
			t.Fatalf("not a bad-file error: %v", err)
		}
		return
	}
	if c != countOf(s) {
		t.Fatalf("counts %+v, records read %+v", c, countOf(s))
	}
	// What was read is encodable (the writer's checks) and reads back the same.
	var buf bytes.Buffer
	w := NewWriter(&buf, s.g)
	if err := writeSnap(w, s.ranks); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	again, _, err := decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := equalSnap(again, s); err != nil {
		t.Fatal(err)
	}
}

// FuzzRegistryReader: any journal applies up to its first bad record and
// says why it stopped; what it applied compacts to a journal that reads
// back the same. The input is also decoded as a record's payload (behind
// the checksum): a worker that decodes encodes back to the same worker.
func FuzzRegistryReader(f *testing.F) {
	var b []byte
	b = appendFileHeader(b, registryMagic, registryVersion)
	for i := range 3 {
		w := testWorker(i)
		b = appendFrame(b, recPut, appendWorker(nil, &w))
	}
	b = appendFrame(b, recDelete, appendString(nil, "worker-0001"))
	f.Add(b)
	w := tailWorker()
	f.Add(appendFrame(appendFileHeader(nil, registryMagic, registryVersion), recPut, appendWorker(nil, &w)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if w, err := decodeWorker(b); err == nil {
			if again, err := decodeWorker(appendWorker(nil, &w)); err != nil || !again.Equal(&w) {
				t.Fatalf("worker %+v reads back as %+v, %v", w, again, err)
			}
		}
		live, records, good, err := readJournal(bytes.NewReader(b))
		if err != nil && !IsBadFile(err) {
			t.Fatalf("not a bad-file error: %v", err)
		}
		if good > int64(len(b)) || records < 0 || (err == nil && good != int64(len(b))) {
			t.Fatalf("good %d of %d, records %d, err %v", good, len(b), records, err)
		}
		// Compact what was applied, as OpenRegistry does, and read it back.
		c := appendFileHeader(nil, registryMagic, registryVersion)
		for _, w := range live {
			c = appendFrame(c, recPut, appendWorker(nil, &w))
		}
		again, _, _, err := readJournal(bytes.NewReader(c))
		if err != nil || len(again) != len(live) {
			t.Fatalf("compacted: %v, %d of %d", err, len(again), len(live))
		}
		for id, w := range live {
			if a := again[id]; !a.Equal(&w) {
				t.Fatalf("worker %q: %+v, want %+v", id, again[id], w)
			}
		}
	})
}

// FuzzSnapshotRecords fuzzes the record decoder behind the checksums: the
// input is the records of a data frame, framed with valid checksums and a
// trailer with the counts read (recordsFile), so mutations reach the
// decoder, not the CRC check. Whatever decodes must write back and read
// the same.
func FuzzSnapshotRecords(f *testing.F) {
	for seed := range uint64(4) {
		b := encode(f, genSnap(rand.New(rand.NewPCG(seed, 1)), 3, 10, 20))
		ends := frameEnds(b)
		f.Add(b[ends[1]+frameHeaderLen : ends[2]])
	}
	f.Add(handRecords())
	f.Fuzz(func(t *testing.T, records []byte) {
		if len(records) > maxFrame {
			return
		}
		checkDecode(t, recordsFile(fuzzGeometry, records))
	})
}

// fuzzGeometry is the geometry of FuzzSnapshotRecords' files.
var fuzzGeometry = Geometry{Shards: 8, SegmentBlocks: 64} // genSnap's shards are below 8
