// Package server serves the kvrouter.v1 Router and Registry gRPC services,
// health, reflection and metrics, on top of scoring and ingest.
//
// It imports internal/scoring and internal/ingest (and the packages they export
// types from).
package server
