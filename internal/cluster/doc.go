// Package cluster coordinates kvrouter replicas over NATS JetStream: one
// worker registry in a key-value bucket, the load and predictions of every
// Route shared on core NATS subjects, and index snapshots in an object store
// for a new replica to start from. Every replica still subscribes to every
// engine itself; nothing of the KV event streams goes through NATS.
//
// The pure parts are I/O-free and tested on their own: the load message
// codec (codec.go) and the per-origin sequence and digest tracker that
// decides when a replica has missed changes and must resynchronise
// (tracker.go). Node (node.go) does the I/O.
package cluster
