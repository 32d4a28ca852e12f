package ingest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSeqScript runs the applier's sequence logic (gaps, replay, covered
// batches, lost history, restarts) against the scripts in testdata/seq.txt,
// with a scripted replay buffer and a sink that records what it was given.
//
// Script commands, one per line ('#' starts a comment):
//
//	case <name>            start a new case with a fresh rank
//	buffer <a>-<b> | none  the engine's replay buffer holds seqs a..b ("none":
//	                       empty; without any buffer line: no replay endpoint)
//	replayfail [n]         the next replay request fails (after delivering n
//	                       batches; default 0)
//	gen <n>                the engine incarnation: batches of another
//	                       incarnation have other payloads at the same seqs
//	connect                a new connection is up
//	live <seq>...          batches arrive on the live socket
//	trace <tok>...         what the sink saw so far: applied seqs and "clear"
//	counters k=v...        gaps, replays, failures, restarts, last
func TestSeqScript(t *testing.T) {
	f, err := os.Open("testdata/seq.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		r    *rank
		rec  *recordSink
		rp   *scriptReplayer
		name string
		gen  byte
	)
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		where := fmt.Sprintf("seq.txt:%d (%s)", line, name)
		if fields[0] != "case" && r == nil {
			t.Fatalf("%s: command before the first case", where)
		}
		switch fields[0] {
		case "case":
			name = strings.Join(fields[1:], " ")
			rec = &recordSink{}
			rp = nil
			gen = 0
			r = &rank{worker: "w", sink: rec, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctx: context.Background()}
		case "buffer":
			if rp == nil {
				rp = &scriptReplayer{}
				r.replay = rp
			}
			rp.gen = gen
			rp.lo, rp.hi = 1, 0
			if fields[1] != "none" {
				a, b, _ := strings.Cut(fields[1], "-")
				rp.lo, rp.hi = mustUint(t, where, a), mustUint(t, where, b)
			}
		case "replayfail":
			rp.fail = true
			rp.failAfter = 0
			if len(fields) > 1 {
				rp.failAfter = mustUint(t, where, fields[1])
			}
		case "gen":
			gen = byte(mustUint(t, where, fields[1]))
			if rp != nil {
				rp.gen = gen
			}
		case "connect":
			r.onConnect()
		case "live":
			for _, s := range fields[1:] {
				seq := mustUint(t, where, s)
				r.live(seq, genPayload(seq, gen))
			}
		case "trace":
			if got, want := strings.Join(rec.trace, " "), strings.Join(fields[1:], " "); got != want {
				t.Errorf("%s: trace\n got: %s\nwant: %s", where, got, want)
			}
		case "counters":
			got := map[string]uint64{
				"gaps": r.gaps.Load(), "replays": r.replays.Load(), "failures": r.replayFailures.Load(),
				"restarts": r.restarts.Load(), "last": r.lastSeq.Load(),
			}
			for _, kv := range fields[1:] {
				k, v, _ := strings.Cut(kv, "=")
				g, ok := got[k]
				if !ok {
					t.Fatalf("%s: unknown counter %q", where, k)
				}
				if w := mustUint(t, where, v); g != w {
					t.Errorf("%s: %s = %d, want %d", where, k, g, w)
				}
			}
		default:
			t.Fatalf("%s: unknown command %q", where, fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func mustUint(t *testing.T, where, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return v
}

func seqPayload(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// genPayload is seq's payload in engine incarnation gen (gen 0: seqPayload).
func genPayload(seq uint64, gen byte) []byte {
	p := seqPayload(seq)
	if gen != 0 {
		p = append(p, gen)
	}
	return p
}

// recordSink records applied seqs (from seqPayload) and clears.
type recordSink struct{ trace []string }

func (s *recordSink) apply(p []byte, st *batchStats) error {
	s.trace = append(s.trace, strconv.FormatUint(binary.BigEndian.Uint64(p), 10))
	st.events++
	return nil
}
func (s *recordSink) reset()         { s.trace = append(s.trace, "clear") }
func (s *recordSink) cached() uint64 { return 0 }

// scriptReplayer serves seqs lo..hi of incarnation gen.
type scriptReplayer struct {
	lo, hi    uint64
	gen       byte
	fail      bool
	failAfter uint64 // batches delivered before the scripted failure
}

func (s *scriptReplayer) replay(_ context.Context, start uint64, fn func(uint64, []byte) error) error {
	fail, n := s.fail, uint64(0)
	s.fail = false
	for seq := max(start, s.lo); seq <= s.hi && s.lo <= s.hi; seq++ {
		if fail && n == s.failAfter {
			break
		}
		if err := fn(seq, genPayload(seq, s.gen)); err != nil {
			return err
		}
		n++
	}
	if fail {
		return errors.New("scripted replay failure")
	}
	return nil
}
