// Package kv is the vocabulary the router's packages share: storage tiers,
// a block of a store run, the worker/rank key, the limit on data-parallel
// size, and the check every store run must pass. It imports no other internal
// package, so every package may import it.
package kv
