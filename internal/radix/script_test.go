package radix

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata expectations with the actual output")

// TestScript runs the scenarios in testdata/*.txt. Each case is a command line,
// a "----" line, and the expected output up to a blank line:
//
//	store <w> [parent=<eh>] [tier=<t>] <eh>:<bh>...   ok | error: <sentinel>
//	storetier <w> <tier> <eh>...                        ok | error: <sentinel>
//	remove <w> <tier> <eh>...                           ok | error: <sentinel>
//	clear <w> / removeworker <id>                       ok
//	match <bh>...                                       one line per score, or (none)
//	cached <w> / workers / stats                        their values
//
// A worker is id/rank; tiers are device, host, disk, external. Every case runs
// with CheckInvariants on.
func TestScript(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

func runScript(t *testing.T, path string) {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	ix := New(Config{Shards: 4, CheckInvariants: true})
	var lines []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	var outFile strings.Builder
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			outFile.WriteString(l + "\n")
			i++
			continue
		}
		cmd := l
		lineNo := i + 1
		i++
		if i >= len(lines) || lines[i] != "----" {
			t.Fatalf("%s:%d: want ---- after command", path, lineNo)
		}
		i++
		var want []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			want = append(want, lines[i])
			i++
		}
		got, err := runCommand(ix, cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, lineNo, cmd, err)
		}
		outFile.WriteString(cmd + "\n----\n" + got)
		if w := strings.Join(want, "\n") + "\n"; got != w && !*rewrite {
			t.Errorf("%s:%d: %s\ngot:\n%swant:\n%s", path, lineNo, cmd, got, w)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(outFile.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var tierNames = [kv.NumTiers]string{"device", "host", "disk", "external"}

func parseTier(s string) (kv.Tier, error) {
	for i, n := range tierNames {
		if s == n {
			return kv.Tier(i), nil
		}
	}
	if v, err := strconv.Atoi(s); err == nil {
		return kv.Tier(v), nil
	}
	return 0, fmt.Errorf("bad tier %q", s)
}

func parseWorker(s string) (kv.WorkerRank, error) {
	id, rank, ok := strings.Cut(s, "/")
	if !ok {
		return kv.WorkerRank{}, fmt.Errorf("bad worker %q (want id/rank)", s)
	}
	r, err := strconv.ParseUint(rank, 10, 32)
	return kv.WorkerRank{ID: id, DPRank: uint32(r)}, err
}

func parseHashes(args []string) ([]uint64, error) {
	out := make([]uint64, 0, len(args))
	for _, a := range args {
		v, err := strconv.ParseUint(a, 0, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
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

func formatScores(ix *Index, s []Score) string {
	if len(s) == 0 {
		return "(none)\n"
	}
	scores := nameScores(ix, s)
	sort.Slice(scores, func(i, j int) bool { return scores[i].Worker.String() < scores[j].Worker.String() })
	var b strings.Builder
	for _, s := range scores {
		fmt.Fprintf(&b, "%s matched=%d", s.Worker, s.Matched)
		for t, n := range s.ByTier {
			if n > 0 {
				fmt.Fprintf(&b, " %s=%d", tierNames[t], n)
			}
		}
		fmt.Fprintf(&b, " cached=%d\n", s.Cached)
	}
	return b.String()
}

func runCommand(ix *Index, cmd string) (string, error) {
	f := strings.Fields(cmd)
	switch f[0] {
	case "store":
		if len(f) < 2 {
			return "", errors.New("store: no worker")
		}
		w, err := parseWorker(f[1])
		if err != nil {
			return "", err
		}
		var parent uint64
		hasParent, tier := false, kv.TierDevice
		var blocks []kv.Block
		for _, a := range f[2:] {
			switch {
			case strings.HasPrefix(a, "parent="):
				if parent, err = strconv.ParseUint(a[7:], 0, 64); err != nil {
					return "", err
				}
				hasParent = true
			case strings.HasPrefix(a, "tier="):
				if tier, err = parseTier(a[5:]); err != nil {
					return "", err
				}
			default:
				e, h, ok := strings.Cut(a, ":")
				if !ok {
					return "", fmt.Errorf("bad block %q (want eh:bh)", a)
				}
				hs, err := parseHashes([]string{e, h})
				if err != nil {
					return "", err
				}
				blocks = append(blocks, kv.Block{EngineHash: hs[0], BlockHash: hs[1]})
			}
		}
		return errResult(ix.Store(w, parent, hasParent, tier, blocks)), nil
	case "storetier", "remove":
		if len(f) < 3 {
			return "", fmt.Errorf("%s: want worker and tier", f[0])
		}
		w, err := parseWorker(f[1])
		if err != nil {
			return "", err
		}
		tier, err := parseTier(f[2])
		if err != nil {
			return "", err
		}
		hs, err := parseHashes(f[3:])
		if err != nil {
			return "", err
		}
		if f[0] == "remove" {
			return errResult(ix.Remove(w, hs, tier)), nil
		}
		return errResult(ix.StoreTier(w, hs, tier)), nil
	case "clear":
		w, err := parseWorker(f[1])
		if err != nil {
			return "", err
		}
		ix.Clear(w)
		return "ok\n", nil
	case "removeworker":
		ix.RemoveWorker(f[1])
		return "ok\n", nil
	case "match":
		hs, err := parseHashes(f[1:])
		if err != nil {
			return "", err
		}
		return formatScores(ix, ix.Match(hs, nil)), nil
	case "cached":
		w, err := parseWorker(f[1])
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d\n", ix.Cached(w)), nil
	case "workers":
		ws := ix.Workers()
		if len(ws) == 0 {
			return "(none)\n", nil
		}
		var b strings.Builder
		for _, w := range ws {
			b.WriteString(w.String() + "\n")
		}
		return b.String(), nil
	case "stats":
		s := ix.Stats()
		return fmt.Sprintf("stores=%d removes=%d stored=%d removed=%d parent_not_found=%d invalid=%d block_not_found=%d duplicate_store=%d nodes=%d residencies=%d\n",
			s.Stores, s.Removes, s.BlocksStored, s.BlocksRemoved, s.ParentNotFound, s.Invalid,
			s.BlockNotFound, s.DuplicateStore, s.Nodes, s.Residencies), nil
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}
