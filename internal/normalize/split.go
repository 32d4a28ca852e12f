package normalize

import "fmt"

// Engine blocks larger than the router's: an engine block of k router blocks
// becomes k router blocks. The last keeps the engine hash (so that a child's
// parent hash still finds it); the others get hashes derived from it, which
// removes and tier-only stores, knowing only the engine hash, derive too.

// maxExpandedHashes bounds the router hashes that tier-only stores and
// removes of one batch expand to: a block size off the wire must not turn a
// few payload bytes into gigabytes.
const maxExpandedHashes = 1 << 20

// splitFactor returns how many router blocks one engine block of bs tokens
// becomes (1 when bs is unknown), or false when bs is not a multiple of the
// router block size.
func (n *Normalizer) splitFactor(bs int) (int, bool) {
	if bs <= 0 {
		return 1, true
	}
	if bs%n.blockSize != 0 {
		return 0, false
	}
	return bs / n.blockSize, true
}

// appendExpanded appends the router engine hashes of engine blocks split k ways.
func appendExpanded(dst, hashes []uint64, k int) []uint64 {
	for _, h := range hashes {
		for i := 0; i < k-1; i++ {
			dst = append(dst, splitHash(h, i))
		}
		dst = append(dst, h)
	}
	return dst
}

// splitHash derives the engine hash of sub-block i (0-based, not the last) of
// an engine block with hash h that is split into several router blocks. The
// last sub-block keeps h itself. It is a SplitMix64 finalizer of h mixed with i.
func splitHash(h uint64, i int) uint64 {
	x := h ^ (uint64(i+1) * 0x9E3779B97F4A7C15)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

// expansionFits reports whether splitting ev's engine blocks k ways keeps the
// batch within maxExpandedHashes; if not, the event is skipped as malformed.
func (n *Normalizer) expansionFits(b *Batch, ev *rawEvent, idx int, k int) bool {
	if k <= 1 || len(b.hashes)+len(ev.BlockHashes)*k <= maxExpandedHashes {
		return true
	}
	b.skipMalformed(ev, idx, fBlockSize, fmt.Sprintf("%d engine blocks split %d ways make %d router blocks, more than %d per batch",
		len(ev.BlockHashes), k, len(ev.BlockHashes)*k, maxExpandedHashes))
	return false
}

// mismatch skips a store whose engine block size is not a multiple of the
// router's, with a rate-limited warning.
func (n *Normalizer) mismatch(b *Batch, bs int) {
	b.skip(reasonBlockSizeMismatch)
	n.warn(int(reasonBlockSizeMismatch), "dropping store: engine block size is not a multiple of the router block size",
		"engine_block_size", bs, "router_block_size", n.blockSize)
}
