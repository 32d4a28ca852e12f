package normalize

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPythonMsgpackInterop decodes batches encoded by Python's msgpack (the
// encoder engines use through msgspec-compatible wire shapes) and checks the
// normalized result.
func TestPythonMsgpackInterop(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("%s not installed: %v", py, err)
	}
	if err := exec.Command(py, "-c", "import msgpack").Run(); err != nil {
		t.Skipf("python3-msgpack not installed (import failed): %v", err)
	}
	out, err := exec.Command(py, filepath.Join("testdata", "python_payloads.py")).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 4 {
		t.Fatalf("%d payloads from python, want 4", len(lines))
	}
	seed := Seed("", "")
	a, b := BlockHash(seed, seqTokens(1, 16), nil), BlockHash(seed, seqTokens(17, 16), nil)
	want := []string{
		"ts=1789095808.84 dp=0 | store device - 15760518052499183552:A 2:B",
		"ts=1.5 dp=1 | store device - 101:A 102:B | remove device 102 | clear",
		"ts=2.5 dp=0 | store device 18446744073709551612 18446744073709551611:SA 18446744073709551610:SB",
		"ts=3.5 dp=2 | store device - 101:A 258:B",
	}
	names := map[uint64]string{a: "A", b: "B",
		BlockHash(Seed("", "t"), seqTokens(1, 16), nil): "SA", BlockHash(Seed("", "t"), seqTokens(17, 16), nil): "SB"}
	n := New(Config{})
	var batch Batch
	for i, ln := range lines {
		payload, err := hex.DecodeString(ln)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Normalize(payload, &batch); err != nil {
			t.Fatalf("payload %d: %v", i, err)
		}
		if got := summarize(&batch, names); got != want[i] {
			t.Errorf("payload %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
}

// summarize renders a batch on one line.
func summarize(b *Batch, names map[uint64]string) string {
	var sb strings.Builder
	sb.WriteString("ts=" + fmtFloat(b.TS) + " dp=" + itoa(int64(b.DPRank)))
	for _, ev := range b.Events {
		sb.WriteString(" | ")
		switch ev.Kind {
		case KindStore:
			sb.WriteString("store " + tierNames[ev.Tier] + " ")
			if ev.HasParent {
				sb.WriteString(utoa(ev.Parent))
			} else {
				sb.WriteString("-")
			}
			for _, bl := range ev.Blocks {
				sb.WriteString(" " + utoa(bl.EngineHash) + ":" + names[bl.BlockHash])
			}
		case KindRemove, KindStoreTier:
			if ev.Kind == KindRemove {
				sb.WriteString("remove " + tierNames[ev.Tier])
			} else {
				sb.WriteString("store_tier " + tierNames[ev.Tier])
			}
			for _, h := range ev.EngineHashes {
				sb.WriteString(" " + utoa(h))
			}
		case KindClear:
			sb.WriteString("clear")
		}
	}
	return sb.String()
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
func itoa(v int64) string       { return strconv.FormatInt(v, 10) }
func utoa(v uint64) string      { return strconv.FormatUint(v, 10) }
