package kv

import "fmt"

// Block is one router-sized block of a store run.
type Block struct {
	// EngineHash is the engine's opaque hash, meaningful only on its worker.
	EngineHash uint64
	// BlockHash is the router block hash of the block's tokens.
	BlockHash uint64
}

// MaxDPSize bounds a worker's data-parallel size, and so the ranks a batch
// may name: a rank past it would create a phantom worker/rank per garbage value.
const MaxDPSize = 1024

// WorkerRank identifies one worker and data-parallel rank.
type WorkerRank struct {
	ID     string
	DPRank uint32
}

func (w WorkerRank) String() string { return fmt.Sprintf("%s/%d", w.ID, w.DPRank) }
