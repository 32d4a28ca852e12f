package replay

// Restore outcomes a router reports per worker/rank in ListWorkers
// (WorkerStatus.restore) after it started from a state directory; empty
// means not restored, or not decided yet.
const (
	// RestoreRestored: the engine replayed from the snapshot's last seq + 1; nothing lost.
	RestoreRestored = "restored"
	// RestoreRebuilt: the engine's buffer no longer reached; cleared and rebuilt from what it still has.
	RestoreRebuilt = "rebuilt"
	// RestoreReset: the engine restarted meanwhile (seq went back); cleared and followed.
	RestoreReset = "reset"
	// RestoreKept and RestoreCleared: no replay socket; kept when the first live seq followed on.
	RestoreKept    = "kept"
	RestoreCleared = "cleared"
)
