package normalize

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// stored normalizes a BlockStored event. Every check runs before the
// Normalizer's state changes, so that a dropped store leaves it as it was.
func (n *Normalizer) stored(ev *rawEvent, idx int, b *Batch) {
	n.learn(ev)
	if r, drop := n.filter(ev); drop {
		b.skip(r)
		return
	}
	if len(ev.BlockHashes) == 0 && len(ev.Tokens) == 0 {
		b.skip(reasonIgnoredEvent)
		return
	}
	if len(ev.Tokens) == 0 {
		n.storedTier(ev, idx, b)
		return
	}
	n.storedBlocks(ev, idx, b)
}

// storedTier normalizes a store without tokens (vLLM's CPU offload
// connector): it can only add a tier to blocks the worker already holds,
// known by engine hash.
func (n *Normalizer) storedTier(ev *rawEvent, idx int, b *Batch) {
	bs := int(ev.BlockSize)
	if bs <= 0 {
		bs = n.engineBlockSize
	}
	k, ok := n.splitFactor(bs)
	if !ok {
		n.mismatch(b, bs)
		return
	}
	if !n.expansionFits(b, ev, idx, k) {
		return
	}
	start := len(b.hashes)
	b.hashes = appendExpanded(b.hashes, ev.BlockHashes, k)
	b.Events = append(b.Events, Event{Kind: KindStoreTier, Tier: tierOf(ev.Medium),
		EngineHashes: b.hashes[start:len(b.hashes):len(b.hashes)]})
}

// storedBlocks normalizes a store with tokens into router blocks.
func (n *Normalizer) storedBlocks(ev *rawEvent, idx int, b *Batch) {
	tokens, bs, ok := blockTokens(ev, idx, b)
	if !ok {
		return
	}
	if n.smallPages(bs) {
		n.storedPages(ev, b, tokens, bs)
		return
	}
	k, ok := n.splitFactor(bs)
	if !ok {
		n.mismatch(b, bs)
		return
	}
	if _, f := kv.CheckRun(ev.BlockHashes, identity, ev.Parent, ev.HasParent); f != kv.RunOK {
		b.skip(reasonInvalidBlockSequence)
		return
	}
	ns, ok := n.namespace(ev)
	if !ok {
		b.skip(reasonAmbiguousCacheNamespace)
		return
	}

	// All checks passed: from here on, state changes.
	n.engineBlockSize = bs
	n.remember(ev.BlockHashes, ns, b)
	seed := n.seeds.seed(ev.LoRAName, ns)
	start := len(b.blocks)
	for j, h := range ev.BlockHashes {
		n.mm = appendBlockMM(n.mm[:0], ev, j)
		toks := tokens[j*bs : (j+1)*bs]
		for i := 0; i < k; i++ {
			eh := h
			if i < k-1 {
				eh = splitHash(h, i)
			}
			b.blocks = append(b.blocks, kv.Block{EngineHash: eh,
				BlockHash: BlockHash(seed, toks[i*n.blockSize:(i+1)*n.blockSize], n.mm)})
		}
	}
	blocks := b.blocks[start:len(b.blocks):len(b.blocks)]
	b.routerBlocks += uint32(len(blocks))
	b.Events = append(b.Events, Event{Kind: KindStore, Tier: tierOf(ev.Medium), HasParent: ev.HasParent,
		Parent: ev.Parent, Blocks: blocks})
}

// blockTokens returns a store's tokens, exactly blocks x block size of them,
// and its block size (inferred from the token count when absent). A store
// whose tokens do not fit its blocks is skipped as malformed.
func blockTokens(ev *rawEvent, idx int, b *Batch) ([]uint32, int, bool) {
	tokens := ev.Tokens
	nb := len(ev.BlockHashes)
	bs := int(ev.BlockSize)
	if ev.Bigram && nb > 0 && (bs > 0 && len(tokens) == nb*bs+1 ||
		bs <= 0 && len(tokens)%nb != 0 && (len(tokens)-1)%nb == 0) {
		// One bigram per position (SGLang's EAGLE keys): the folded
		// tokens end with the next block's first token.
		tokens = tokens[:len(tokens)-1]
	}
	if bs <= 0 {
		if nb == 0 || len(tokens)%nb != 0 {
			b.skipMalformed(ev, idx, fTokens, fmt.Sprintf("%d tokens is not a multiple of %d blocks and block_size is absent", len(tokens), nb))
			return nil, 0, false
		}
		bs = len(tokens) / nb
	}
	if len(tokens) != nb*bs {
		b.skipMalformed(ev, idx, fTokens, fmt.Sprintf("%d tokens, want %d blocks x %d", len(tokens), nb, bs))
		return nil, 0, false
	}
	return tokens, bs, true
}

func identity(h uint64) uint64 { return h }
