package normalize

// removed normalizes a BlockRemoved event. A remove names engine blocks
// only, so when engine blocks are split into router blocks it removes every
// part, split by the engine block size learned from the worker's stores.
func (n *Normalizer) removed(ev *rawEvent, idx int, b *Batch) {
	if r, drop := n.filter(ev); drop {
		b.skip(r)
		return
	}
	if len(ev.BlockHashes) == 0 {
		b.skip(reasonIgnoredEvent)
		return
	}
	if n.smallPages(n.engineBlockSize) {
		n.forget(ev.BlockHashes)
		n.removedPages(ev, b)
		return
	}
	k, _ := n.splitFactor(n.engineBlockSize)
	if !n.expansionFits(b, ev, idx, k) {
		return
	}
	n.forget(ev.BlockHashes)
	if k == 1 {
		// Nothing to split: the decoded hashes are the event's (the Batch
		// owns both).
		b.Events = append(b.Events, Event{Kind: KindRemove, Tier: tierOf(ev.Medium), EngineHashes: ev.BlockHashes})
		return
	}
	start := len(b.hashes)
	b.hashes = appendExpanded(b.hashes, ev.BlockHashes, k)
	b.Events = append(b.Events, Event{Kind: KindRemove, Tier: tierOf(ev.Medium),
		EngineHashes: b.hashes[start:len(b.hashes):len(b.hashes)]})
}
