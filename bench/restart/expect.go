package restart

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/bench/replay"
)

// RankExpect is what one rank's restore must be, from its engine's seqs: the
// router must replay at least every batch published while it was down (Down)
// and at most those since two snapshot intervals before the kill (Window), or
// at worst the engine's whole history (Total). A Reset engine restarted
// while the router was down (its counts are then of the new process). A
// Fresh one had published nothing two snapshot intervals before the kill, so
// the last snapshot may hold no position for its rank to restore: the router
// then follows it from seq 0 and may report no outcome ("").
type RankExpect struct {
	Buffer              int
	Down, Window, Total uint64
	Reset, Fresh        bool
}

// mustRestore: the buffer covers every batch the router can be missing.
func (x RankExpect) mustRestore() bool {
	return x.Window <= uint64(x.Buffer) || x.Total <= uint64(x.Buffer)
}

// mustRebuild: the buffer lost batches the router never saw.
func (x RankExpect) mustRebuild() bool { return x.Down > uint64(x.Buffer) }

// want lists the right restore outcomes and says why.
func (x RankExpect) want() ([]string, string) {
	w, why := x.wantStream()
	if x.Fresh && !x.Reset {
		w = append(w, "")
		why += " (or none: it had published nothing as of the last snapshot)"
	}
	return w, why
}

func (x RankExpect) wantStream() ([]string, string) {
	switch {
	case x.Reset:
		return []string{replay.RestoreReset}, "its engine restarted while the router was down"
	case x.mustRestore():
		return []string{replay.RestoreRestored}, fmt.Sprintf("its buffer of %d batches holds the %d it can be missing", x.Buffer, min(x.Window, x.Total))
	case x.mustRebuild():
		return []string{replay.RestoreRebuilt}, fmt.Sprintf("%d batches were published while the router was down, its buffer holds %d", x.Down, x.Buffer)
	}
	return []string{replay.RestoreRestored, replay.RestoreRebuilt}, fmt.Sprintf("its buffer of %d batches may or may not reach the snapshot", x.Buffer)
}

// mustExact: the rank must match its engine, given its restore outcome: a
// reset rank follows the new process from its start, a restored one lost
// nothing; an ambiguous rank counts as restored until the router says not.
func (x RankExpect) mustExact(restore string) bool {
	if x.Reset || x.mustRestore() {
		return true
	}
	return !x.mustRebuild() && (restore == "" || restore == replay.RestoreRestored)
}

func (x RankExpect) String() string {
	w, _ := x.want()
	if i := slices.Index(w, ""); i >= 0 {
		w[i] = "none"
	}
	return strings.Join(w, "|")
}
