// Package discovery finds engines and keeps the fleet's registry in step
// with them, so that no one writes a controller calling RegisterWorker and
// UnregisterWorker: Kubernetes pods selected by label or by a Gateway API
// Inference Extension InferencePool, and DNS names (SRV or A/AAAA) resolved
// on an interval.
//
// Each Source reports the whole set of workers it finds whenever it
// changes; a Syncer merges the sets and applies the difference against the
// registry's "discovery" registrations (Diff, which does no I/O) through
// the fleet's Registrar. Workers of the config file or the Registry API
// outrank discovery and are left alone. Because the syncer diffs against
// the registry rather than a memory of its own, a restarted router removes
// workers that went away while it was down, and replicas sharing a
// registry converge on the same registrations.
package discovery
