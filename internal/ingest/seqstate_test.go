package ingest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestSeqScripts runs the sequence state machine through testdata/seq/*.txt
// (regenerate the expectations with -rewrite). Commands:
//
//	init [no-replay]             a fresh rank (an engine with, or without, a replay endpoint)
//	restore last=N [sum=S] [epoch=E]
//	                             the rank starts from a snapshot: it holds the engine's
//	                             blocks as of batch N (digest S) of topic epoch E
//	connect [limited]            a new connection is up (limited: within the catch-up
//	                             window of an earlier full catch-up)
//	live seq=<seqs> [sum=N] [epoch=E] [undecodable=<seqs>]
//	                             live batches; sum is the payload's digest (another
//	                             engine incarnation's batch at the same seq differs),
//	                             epoch the topic's sgl-kv-epoch
//	replay-reply seq=<seqs> [sum=N] [epoch=E] [undecodable=<seqs>]
//	                             replies of the replay in progress
//	undecodable seq=N            batch N did not decode (the harness steps this itself
//	                             after an apply, see undecodable=)
//	undecodable=<seqs>           (on any input) when a step applies one of these
//	                             seqs, the batch does not decode: as the shell does, the
//	                             harness steps an undecodable input for it and prints
//	                             "undecodable <seq>:" before its actions
//	replay-end | replay-failed | replay-abandoned
//	                             the replay reached its end marker, failed (an error,
//	                             a timeout, or cut off), or the rank stopped under it
//	state                        the state machine's state
//	counters                     what the rank's status would count from the actions
//	                             (and restore=<outcome> once a restore's is decided)
//
// <seqs> is a seq, a range a-b, or a list of both in parentheses. An input's
// output is its actions, one a line ("ok": none).
//
// When every script ran, the "coverage" subtest checks that together they
// follow every rule of the state machine, produce every kind of action,
// counter, log line and restore outcome, and step every input the state
// machine expects in every phase.
func TestSeqScripts(t *testing.T) {
	var cov seqCoverage
	scripts, err := filepath.Glob("testdata/seq/*.txt")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in testdata/seq: %v", err)
	}
	ran := 0
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			ran++
			h := &seqHarness{cov: &cov}
			datadriven.RunTest(t, path, h.run)
		})
	}
	t.Run("coverage", func(t *testing.T) {
		if ran != len(scripts) {
			t.Skipf("%d of %d scripts ran", ran, len(scripts))
		}
		if missing := cov.missing(seqRuleNames(t)); len(missing) > 0 {
			t.Errorf("the scripts never exercise:\n%s", strings.Join(missing, "\n"))
		}
	})
}

// seqHarness is one script's state machine and what its actions added up to.
type seqHarness struct {
	s   *seqState
	cov *seqCoverage
	// counts are the status counters the rank's shell keeps from the actions
	// (count, request-replay, apply and engine-restarts for the last seq),
	// and the restore's outcome (restore-outcome).
	gaps, replays, failures, restarts, lastSeq, limited uint64
	restore                                             string
	// preApply is lastSeq before the last apply: the shell sets LastSeq
	// only once a batch is applied, so not for one that does not decode.
	preApply uint64
}

func (h *seqHarness) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "init" && h.s == nil {
		d.Fatalf(t, "%s before init", d.Cmd)
	}
	switch d.Cmd {
	case "init":
		h.s = &seqState{canReplay: !d.HasArg("no-replay")}
		h.gaps, h.replays, h.failures, h.restarts, h.lastSeq, h.limited, h.restore = 0, 0, 0, 0, 0, 0, ""
		return "ok"
	case "state":
		return h.s.String()
	case "counters":
		c := fmt.Sprintf("gaps=%d replays=%d replay-failures=%d engine-restarts=%d last-seq=%d",
			h.gaps, h.replays, h.failures, h.restarts, h.lastSeq)
		if h.limited > 0 {
			c += fmt.Sprintf(" catch-ups-limited=%d", h.limited)
		}
		if h.restore != "" {
			c += " restore=" + h.restore
		}
		return c
	}
	var ins []seqInput
	switch d.Cmd {
	case "restore":
		ins = []seqInput{h.restoreInput(t, d)}
	case "connect":
		ins = []seqInput{{kind: inConnect, limited: d.HasArg("limited")}}
	case "live", "replay-reply":
		ins = h.batches(t, d)
	case "replay-end":
		ins = []seqInput{{kind: inReplayEnd}}
	case "replay-failed":
		ins = []seqInput{{kind: inReplayFailed}}
	case "replay-abandoned":
		ins = []seqInput{{kind: inReplayAbandoned}}
	case "undecodable":
		in := seqInput{kind: inUndecodable}
		d.ScanArgs(t, "seq", &in.seq)
		ins = []seqInput{in}
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	bad := map[uint64]bool{}
	if arg, ok := d.Arg("undecodable"); ok {
		for _, v := range arg.Vals {
			for _, seq := range parseSeqs(t, d, v) {
				bad[seq] = true
			}
		}
	}
	var out []string
	for _, in := range ins {
		acts := h.step(in)
		for _, a := range acts {
			out = append(out, a.String())
		}
		// The shell applies the batch: the step's last action.
		if n := len(acts); n > 0 && acts[n-1].kind == actApply && bad[acts[n-1].seq] {
			seq := acts[n-1].seq
			out = append(out, fmt.Sprintf("undecodable %d:", seq))
			h.lastSeq = h.preApply
			for _, a := range h.step(seqInput{kind: inUndecodable, seq: seq}) {
				out = append(out, a.String())
			}
		}
	}
	if len(out) == 0 {
		return "ok"
	}
	return strings.Join(out, "\n")
}

// restoreInput parses a restore command; the shell shows the restored seq
// as the last applied one.
func (h *seqHarness) restoreInput(t *testing.T, d *datadriven.TestData) seqInput {
	in := seqInput{kind: inRestore}
	d.ScanArgs(t, "last", &in.seq)
	if d.HasArg("sum") {
		d.ScanArgs(t, "sum", &in.sum)
	}
	if d.HasArg("epoch") {
		var e string
		d.ScanArgs(t, "epoch", &e)
		in.epoch = []byte(e)
	}
	h.lastSeq = in.seq
	return in
}

// batches parses a live or replay-reply command into its inputs.
func (h *seqHarness) batches(t *testing.T, d *datadriven.TestData) []seqInput {
	kind := inLive
	if d.Cmd == "replay-reply" {
		kind = inReplayReply
	}
	var sum uint64
	var epoch []byte
	if d.HasArg("sum") {
		d.ScanArgs(t, "sum", &sum)
	}
	if d.HasArg("epoch") {
		var e string
		d.ScanArgs(t, "epoch", &e)
		epoch = []byte(e)
	}
	arg, ok := d.Arg("seq")
	if !ok {
		d.Fatalf(t, "%s needs seq=", d.Cmd)
	}
	var ins []seqInput
	for _, v := range arg.Vals {
		for _, seq := range parseSeqs(t, d, v) {
			ins = append(ins, seqInput{kind: kind, seq: seq, sum: sum, epoch: epoch})
		}
	}
	return ins
}

// parseSeqs parses a seq or a range a-b.
func parseSeqs(t *testing.T, d *datadriven.TestData, v string) []uint64 {
	lo, hi, isRange := strings.Cut(v, "-")
	a, err := strconv.ParseUint(lo, 10, 64)
	b := a
	if err == nil && isRange {
		b, err = strconv.ParseUint(hi, 10, 64)
	}
	if err != nil || b < a {
		d.Fatalf(t, "bad seq %q", v)
	}
	var seqs []uint64
	for seq := a; seq <= b; seq++ {
		seqs = append(seqs, seq)
	}
	return seqs
}

// step steps one input, recording coverage and the counters.
func (h *seqHarness) step(in seqInput) []seqAction {
	h.cov.pairs[seqPhaseOf(h.s)][in.kind] = true
	acts := h.s.step(in, nil)
	h.cov.rules |= h.s.taken
	for _, a := range acts {
		h.cov.actions[a.kind] = true
		switch a.kind {
		case actApply:
			h.preApply, h.lastSeq = h.lastSeq, a.seq
		case actReplay:
			h.replays++
		case actCount:
			h.cov.counters[a.counter] = true
			switch a.counter {
			case countGaps:
				h.gaps++
			case countReplayFailures:
				h.failures++
			case countRestarts:
				h.restarts++
				h.lastSeq = 0
			case countCatchUpsLimited:
				h.limited++
			}
		case actLog:
			h.cov.notes[a.note] = true
		case actOutcome:
			h.cov.outcomes[a.outcome] = true
			h.restore = restoreOutcomes[a.outcome].name
			if a.outcome == outcomeReset {
				h.lastSeq = 0
			}
		}
	}
	return acts
}

// seqPhase is what the state machine is doing, for coverage: waiting for
// live batches (holding nothing, nothing after an empty buffer, batches, or
// a snapshot's batches whose restore is not decided) or replaying for one of
// its purposes.
type seqPhase uint8

const (
	phaseEmpty seqPhase = iota
	phaseFromZero
	phaseHolding
	phaseRestoring
	phaseReplaying // + replayPurpose - 1
	numSeqPhases   = phaseReplaying + seqPhase(numReplayPurposes) - 1
)

func seqPhaseOf(s *seqState) seqPhase {
	switch {
	case s.rp.purpose != replayNone:
		return phaseReplaying + seqPhase(s.rp.purpose) - 1
	case s.restoring:
		return phaseRestoring
	case s.held.ok:
		return phaseHolding
	case s.held.fromZero:
		return phaseFromZero
	}
	return phaseEmpty
}

func (p seqPhase) String() string {
	if p >= phaseReplaying {
		return "replaying " + replayPurposeNames[p-phaseReplaying+1]
	}
	return [...]string{"empty", "from-zero", "holding", "restoring"}[p]
}

// expected reports whether the state machine expects input in in phase p:
// a restore first (so in the empty phase), connect and live batches while
// waiting for them, a replay's replies and outcomes while replaying, and a
// batch that does not decode after a live batch or a reply was applied.
func expected(p seqPhase, in seqInputKind) bool {
	switch in {
	case inRestore:
		return p == phaseEmpty
	case inUndecodable:
		return p == phaseHolding || p >= phaseReplaying
	}
	return (p >= phaseReplaying) == (in >= inReplayReply)
}

// seqCoverage is what the scripts exercised.
type seqCoverage struct {
	rules    uint64 // bit per seqRule
	actions  [numSeqActions]bool
	counters [numSeqCounters]bool
	notes    [numSeqNotes]bool
	outcomes [numRestoreOutcomes]bool
	pairs    [numSeqPhases][numSeqInputs]bool // (phase, input) stepped
}

// missing lists what was never exercised. Every phase expects some inputs
// (see expected); the others are one rule (ruleUnexpected).
func (c *seqCoverage) missing(ruleNames []string) []string {
	var m []string
	for r := seqRule(0); r < numSeqRules; r++ {
		if c.rules&(1<<r) == 0 {
			m = append(m, "rule "+ruleNames[r])
		}
	}
	for k, ok := range c.actions {
		if !ok {
			m = append(m, "action "+seqActionNames[k])
		}
	}
	for k, ok := range c.counters {
		if !ok {
			m = append(m, "counter "+seqCounterNames[k])
		}
	}
	for k, ok := range c.notes {
		if !ok {
			m = append(m, "log "+seqNotes[k].name)
		}
	}
	for k, ok := range c.outcomes {
		if !ok {
			m = append(m, "restore outcome "+restoreOutcomes[k].name)
		}
	}
	for p := seqPhase(0); p < numSeqPhases; p++ {
		for in := seqInputKind(0); in < numSeqInputs; in++ {
			if expected(p, in) && !c.pairs[p][in] {
				m = append(m, fmt.Sprintf("input %s while %s", seqInputNames[in], p))
			}
		}
	}
	return m
}

// seqRuleNames reads the names of the seqRule constants from seqstate.go,
// in order, for the coverage report.
func seqRuleNames(t *testing.T) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "seqstate.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, sp := range g.Specs {
				if n := sp.(*ast.ValueSpec).Names[0].Name; strings.HasPrefix(n, "rule") {
					names = append(names, n)
				}
			}
		}
	}
	if len(names) != int(numSeqRules) {
		t.Fatalf("read %d rule names from seqstate.go, want %d", len(names), numSeqRules)
	}
	return names
}
