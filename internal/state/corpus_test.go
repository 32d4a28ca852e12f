package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestWriteFuzzCorpus regenerates the fuzz targets' seed corpus in
// testdata/fuzz when KVROUTER_WRITE_CORPUS=1:
//
//	KVROUTER_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus ./internal/state
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("KVROUTER_WRITE_CORPUS") != "1" {
		t.Skip("set KVROUTER_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	snap := map[string][]byte{}
	for seed := range uint64(3) {
		snap[fmt.Sprintf("valid-%d", seed)] = encode(t, genSnap(rand.New(rand.NewPCG(seed, 2)), 3, 15, 30))
	}
	_, small := smallSnapshot(t)
	snap["small"] = small
	snap["empty"] = encode(t, snapData{})
	snap["cut-frame"] = small[:frameEnds(small)[2]]
	snap["cut-mid"] = small[:len(small)/2]
	flipped := bytes.Clone(small)
	flipped[len(flipped)/3] ^= 0x20
	snap["flipped"] = flipped
	future := bytes.Clone(small)
	binary.LittleEndian.PutUint32(future[8:], snapshotVersion+1)
	binary.LittleEndian.PutUint32(future[12:], crc(future[:12]))
	snap["future-version"] = future
	writeCorpus(t, "FuzzSnapshotReader", snap)

	recs := map[string][]byte{}
	for name, b := range snap {
		if ends := frameEnds(b); len(b) > 0 && len(ends) > 3 && name != "future-version" && name != "flipped" {
			recs[name] = b[ends[1]+frameHeaderLen : ends[2]]
		}
	}
	recs["hand"] = handRecords()
	writeCorpus(t, "FuzzSnapshotRecords", recs)

	reg := map[string][]byte{}
	j, _ := history(t)
	reg["history"] = j
	reg["cut"] = j[:len(j)-5]
	fl := bytes.Clone(j)
	fl[40] ^= 1
	reg["flipped"] = fl
	reg["header-only"] = j[:fileHeaderLen]
	writeCorpus(t, "FuzzRegistryReader", reg)
}

func writeCorpus(t *testing.T, target string, files map[string][]byte) {
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
