package radix

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// TestScript runs the scripts in testdata, each against a fresh index with
// CheckInvariants on (so every call is checked), in datadriven's format: a
// command with its arguments, a "----" line, and the expected output up to a
// blank line; -rewrite rewrites the expected outputs. The commands:
//
//	store worker=<w> [parent=<eh>] [tier=<t>] [blocks=(<eh>:<bh>, ...)]  ok | error: <sentinel>
//	storetier worker=<w> tier=<t> hashes=(<eh>, ...)                  ok | error: <sentinel>
//	remove worker=<w> tier=<t> hashes=(<eh>, ...)                     ok | error: <sentinel>
//	clear worker=<w> / removeworker id=<id>                           ok
//	match [prompt=(<bh>, ...)]                                        one line per score, or (none)
//	cached worker=<w> / workers / stats                               their values
//
// A worker is id/rank; a tier is device, host, disk, external or a number;
// hashes are numbers (0x for hex).
func TestScript(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		ix := New(Config{Shards: 4, CheckInvariants: true, SlotReuseDelay: -1})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return runScriptCmd(t, ix, d)
		})
	})
}

// runScriptCmd runs one command of a script on ix and returns its output.
func runScriptCmd(t *testing.T, ix *Index, d *datadriven.TestData) string {
	switch d.Cmd {
	case "store":
		return scriptStore(t, ix, d)
	case "storetier":
		return errResult(ix.StoreTier(scriptWorker(t, d), scriptHashes(t, d, "hashes"), scriptTier(t, d)))
	case "remove":
		return errResult(ix.Remove(scriptWorker(t, d), scriptHashes(t, d, "hashes"), scriptTier(t, d)))
	case "clear":
		ix.Clear(scriptWorker(t, d))
		return "ok\n"
	case "removeworker":
		var id string
		d.ScanArgs(t, "id", &id)
		ix.RemoveWorker(id)
		return "ok\n"
	case "match":
		return formatScores(ix, ix.Match(scriptHashes(t, d, "prompt"), nil))
	case "cached":
		return fmt.Sprintf("%d\n", ix.Cached(scriptWorker(t, d)))
	case "workers":
		return formatWorkers(ix.Workers())
	case "stats":
		s := ix.Stats()
		return fmt.Sprintf("stores=%d removes=%d stored=%d removed=%d parent_not_found=%d invalid=%d block_not_found=%d duplicate_store=%d nodes=%d residencies=%d\n",
			s.Stores, s.Removes, s.BlocksStored, s.BlocksRemoved, s.ParentNotFound, s.Invalid,
			s.BlockNotFound, s.DuplicateStore, s.Nodes, s.Residencies)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// scriptStore runs a store command: blocks are engine hash:block hash pairs.
func scriptStore(t *testing.T, ix *Index, d *datadriven.TestData) string {
	var parent uint64
	hasParent := d.HasArg("parent")
	if hasParent {
		parent = scriptHashes(t, d, "parent")[0]
	}
	tier := kv.TierDevice
	if d.HasArg("tier") {
		tier = scriptTier(t, d)
	}
	var blocks []kv.Block
	if arg, ok := d.Arg("blocks"); ok {
		for _, v := range arg.Vals {
			e, h, cut := strings.Cut(v, ":")
			if !cut {
				d.Fatalf(t, "bad block %q (want eh:bh)", v)
			}
			blocks = append(blocks, kv.Block{EngineHash: parseHash(t, d, e), BlockHash: parseHash(t, d, h)})
		}
	}
	return errResult(ix.Store(scriptWorker(t, d), parent, hasParent, tier, blocks))
}

var tierNames = [kv.NumTiers]string{"device", "host", "disk", "external"}

// scriptTier is the tier argument: a tier's name or a number (which may be
// out of range, to test that).
func scriptTier(t *testing.T, d *datadriven.TestData) kv.Tier {
	var s string
	d.ScanArgs(t, "tier", &s)
	for i, n := range tierNames {
		if s == n {
			return kv.Tier(i)
		}
	}
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		d.Fatalf(t, "bad tier %q", s)
	}
	return kv.Tier(v)
}

// scriptWorker is the worker argument, id/rank.
func scriptWorker(t *testing.T, d *datadriven.TestData) kv.WorkerRank {
	var s string
	d.ScanArgs(t, "worker", &s)
	id, rank, ok := strings.Cut(s, "/")
	r, err := strconv.ParseUint(rank, 10, 32)
	if !ok || err != nil {
		d.Fatalf(t, "bad worker %q (want id/rank)", s)
	}
	return kv.WorkerRank{ID: id, DPRank: uint32(r)}
}

// scriptHashes is the list of hashes of argument key (none when it is absent).
func scriptHashes(t *testing.T, d *datadriven.TestData, key string) []uint64 {
	arg, _ := d.Arg(key)
	out := make([]uint64, 0, len(arg.Vals))
	for _, v := range arg.Vals {
		out = append(out, parseHash(t, d, v))
	}
	return out
}

func parseHash(t *testing.T, d *datadriven.TestData, s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
	if err != nil {
		d.Fatalf(t, "bad hash %q: %v", s, err)
	}
	return v
}

func errResult(err error) string {
	if err == nil {
		return "ok\n"
	}
	for _, s := range []error{ErrParentNotFound, ErrInvalid, ErrBlockNotFound} {
		if errors.Is(err, s) {
			return "error: " + s.Error() + "\n"
		}
	}
	return "error: unexpected " + err.Error() + "\n"
}

// formatScores lists a match's scores, one line per worker/rank by name.
func formatScores(ix *Index, out []Score) string {
	if len(out) == 0 {
		return "(none)\n"
	}
	scores := nameScores(ix, out)
	sort.Slice(scores, func(i, j int) bool { return scores[i].Worker.String() < scores[j].Worker.String() })
	var b strings.Builder
	for _, sc := range scores {
		fmt.Fprintf(&b, "%s matched=%d", sc.Worker, sc.Matched)
		for t, n := range sc.ByTier {
			if n > 0 {
				fmt.Fprintf(&b, " %s=%d", tierNames[t], n)
			}
		}
		fmt.Fprintf(&b, " cached=%d\n", sc.Cached)
	}
	return b.String()
}

func formatWorkers(workers []kv.WorkerRank) string {
	if len(workers) == 0 {
		return "(none)\n"
	}
	var b strings.Builder
	for _, w := range workers {
		b.WriteString(w.String() + "\n")
	}
	return b.String()
}
