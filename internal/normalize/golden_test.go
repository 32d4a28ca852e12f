package normalize

import (
	"encoding/hex"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Golden cases: testdata/cases/*.txt, scripts for
// github.com/cockroachdb/datadriven (go test -rewrite regenerates the
// expected output). Each file starts with a comment saying what it shows;
// every payload goes through the same Normalizer, in order. Commands:
//
//	config block_size=16 [max_namespaced_blocks=N]
//	                    a new Normalizer with that configuration (the
//	                    default one when a file has no config)
//	hashes              names router block hashes for the output, one per
//	                    input line: NAME [lora=L] [ns=N] tokens=A..B[,C..D] [mm=ID,ID]
//	payload             normalizes the input, a msgpack description (see
//	                    msgdesc_test.go), and prints the batch
//	hex                 the same for a payload given as hex bytes ('#' lines
//	                    are comments)
//	reset               calls Normalizer.Reset
func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/cases", func(t *testing.T, path string) {
		g := newGolden()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return g.run(t, td)
		})
	})
}

// golden is the state of one golden script.
type golden struct {
	n     *Normalizer
	b     Batch
	names map[uint64]string
}

func newGolden() *golden {
	// Every error of a batch is shown.
	return &golden{n: New(Config{MaxErrors: 1 << 10}), names: map[uint64]string{}}
}

func (g *golden) run(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "config":
		g.n = g.config(t, td)
		return ""
	case "hashes":
		for _, ln := range strings.Split(td.Input, "\n") {
			f := strings.Fields(ln)
			if len(f) == 0 {
				continue
			}
			h, err := namedHash(f[1:])
			if err != nil {
				td.Fatalf(t, "%s: %v", ln, err)
			}
			if old, dup := g.names[h]; dup {
				td.Fatalf(t, "hash %s equals hash %s", f[0], old)
			}
			g.names[h] = f[0]
		}
		return ""
	case "payload", "hex":
		payload, err := casePayload(td)
		if err != nil {
			td.Fatalf(t, "%v", err)
		}
		return render(g.n, payload, &g.b, g.names)
	case "reset":
		g.n.Reset()
		return ""
	}
	td.Fatalf(t, "unknown command %q", td.Cmd)
	return ""
}

func (g *golden) config(t *testing.T, td *datadriven.TestData) *Normalizer {
	cfg := Config{MaxErrors: 1 << 10} // every error of a batch is shown
	maxNS := 0
	for _, a := range td.CmdArgs {
		switch a.Key {
		case "block_size":
			a.Scan(t, 0, &cfg.BlockSize)
		case "max_namespaced_blocks":
			a.Scan(t, 0, &maxNS)
		default:
			td.Fatalf(t, "unknown config %q", a.Key)
		}
	}
	n := New(cfg)
	if maxNS > 0 {
		n.maxNS = maxNS
	}
	return n
}

// casePayload returns the payload of a payload or hex command.
func casePayload(td *datadriven.TestData) ([]byte, error) {
	if td.Cmd == "payload" {
		return encodeDesc(td.Input)
	}
	var hx strings.Builder
	for _, ln := range strings.Split(td.Input, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(ln), "#") {
			hx.WriteString(strings.Join(strings.Fields(ln), ""))
		}
	}
	return hex.DecodeString(hx.String())
}

// rewriting reports whether the tests run with datadriven's -rewrite flag,
// which also regenerates testdata/hash_vectors.json.
func rewriting() bool {
	f := flag.Lookup("rewrite")
	return f != nil && f.Value.String() == "true"
}

// namedHash computes a hash line's BlockHash.
func namedHash(args []string) (uint64, error) {
	var lora, ns string
	var tokens []uint32
	var mm []uint64
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "lora":
			lora = unq(v)
		case "ns":
			ns = unq(v)
		case "tokens":
			for _, r := range strings.Split(v, ",") {
				toks, err := tokenRange(r)
				if err != nil {
					return 0, err
				}
				tokens = append(tokens, toks...)
			}
		case "mm":
			for _, id := range strings.Split(v, ",") {
				mm = append(mm, MMHash(unq(id)))
			}
		default:
			return 0, fmt.Errorf("unknown hash argument %q", k)
		}
	}
	return BlockHash(Seed(lora, ns), tokens, mm), nil
}

// tokenRange parses "A..B" (the tokens A to B) or "A".
func tokenRange(r string) ([]uint32, error) {
	lo, hi, ok := strings.Cut(r, "..")
	a, err := strconv.ParseUint(lo, 10, 32)
	if err != nil {
		return nil, err
	}
	b := a
	if ok {
		if b, err = strconv.ParseUint(hi, 10, 32); err != nil {
			return nil, err
		}
	}
	var out []uint32
	for x := a; x <= b; x++ {
		out = append(out, uint32(x))
	}
	return out, nil
}

func unq(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

var tierNames = [...]string{"device", "host", "disk", "external"}

// render normalizes one payload and prints the result readably.
func render(n *Normalizer, payload []byte, b *Batch, names map[uint64]string) string {
	var sb strings.Builder
	if err := n.Normalize(payload, b); err != nil {
		fmt.Fprintf(&sb, "error: %v\n", err)
		if len(b.Events) != 0 || len(b.Errors) != 0 {
			fmt.Fprintf(&sb, "BUG: batch not empty after error\n")
		}
		return sb.String()
	}
	eng := engineNamer(payload)
	fmt.Fprintf(&sb, "batch ts=%s dp_rank=%d\n", strconv.FormatFloat(b.TS, 'f', -1, 64), b.DPRank)
	for _, ev := range b.Events {
		renderEvent(&sb, ev, eng, names)
	}
	var sk []string
	for r, c := range b.Skipped {
		if c > 0 {
			sk = append(sk, fmt.Sprintf("%s=%d", Reason(r), c))
		}
	}
	sort.Strings(sk)
	if len(sk) > 0 {
		fmt.Fprintf(&sb, "skipped %s\n", strings.Join(sk, " "))
	}
	for _, e := range b.Errors {
		fmt.Fprintf(&sb, "event error: %v\n", e)
	}
	fmt.Fprintf(&sb, "counts stored=%d removed=%d cleared=%d unknown=%d engine_blocks=%d blocks=%d namespaced=%d",
		b.tags[tagStored], b.tags[tagRemoved], b.tags[tagCleared], b.tags[tagUnknown],
		b.engineBlocks, b.routerBlocks, n.namespacedBlocks())
	if b.namespaceOverflow > 0 {
		fmt.Fprintf(&sb, " namespace_overflow=%d", b.namespaceOverflow)
	}
	if b.held > 0 {
		fmt.Fprintf(&sb, " held=%d", b.held)
	}
	sb.WriteString("\n")
	return sb.String()
}

// engineNamer returns a function that prints an engine hash, naming the
// split sub-block hashes of every engine hash in the payload.
func engineNamer(payload []byte) func(uint64) string {
	syn := map[uint64]string{}
	var rb rawBatch
	if decodeBatch(payload, &rb) == nil {
		for _, ev := range rb.Events {
			for _, h := range ev.BlockHashes {
				for i := 0; i < 8; i++ {
					syn[splitHash(h, i)] = fmt.Sprintf("split(%d,%d)", h, i)
				}
			}
		}
	}
	return func(h uint64) string {
		if s, ok := syn[h]; ok {
			return s
		}
		return strconv.FormatUint(h, 10)
	}
}

func renderEvent(sb *strings.Builder, ev Event, eng func(uint64) string, names map[uint64]string) {
	switch ev.Kind {
	case KindStore:
		parent := "-"
		if ev.HasParent {
			parent = eng(ev.Parent)
		}
		fmt.Fprintf(sb, "store tier=%s parent=%s\n", tierNames[ev.Tier], parent)
		for _, bl := range ev.Blocks {
			name, ok := names[bl.BlockHash]
			if !ok {
				name = fmt.Sprintf("%#016x", bl.BlockHash)
			}
			fmt.Fprintf(sb, "  block %s %s\n", eng(bl.EngineHash), name)
		}
	case KindStoreTier, KindRemove:
		kind := "store_tier"
		if ev.Kind == KindRemove {
			kind = "remove"
		}
		var hs []string
		for _, h := range ev.EngineHashes {
			hs = append(hs, eng(h))
		}
		fmt.Fprintf(sb, "%s tier=%s hashes=[%s]\n", kind, tierNames[ev.Tier], strings.Join(hs, " "))
	case KindClear:
		sb.WriteString("clear\n")
	default:
		fmt.Fprintf(sb, "BUG: kind %d\n", ev.Kind)
	}
}
