// Package fleet owns a worker's lifecycle: validate, follow (ingest), index
// and route (scoring), persist (a Store), and forget. Every source of
// registrations calls it: the Registry API, the YAML config file, the
// cluster's registry bucket, and discovery.
//
// Sources and precedence: config > api > discovery. A source may replace or
// remove a registration of its own rank or below; a lower source trying to
// replace or remove a higher source's worker gets ErrOutranked. The config
// file is the operator's declaration, so it wins over a worker registered
// through the API under the same id; the API wins over discovery so that an
// operator can pin a worker discovery also sees.
//
// Two levels:
//   - Upsert and Remove (the Registrar interface) apply the precedence and
//     persist: what the config file, the API and discovery call.
//   - Register, Unregister and Registered are the raw create/delete with the
//     store optional: what start-up restore and the cluster's reconciliation
//     (which applies the shared bucket, already persisted) call.
//
// Errors carry sentinels for errors.Is: ErrInvalid (a field is wrong),
// ErrRegistered (the id is taken), ErrRemoving (the id's previous
// subscriptions are still stopping; retry), ErrNotFound, ErrOutranked,
// ErrStore (the store did not save the change). Scoring's errors
// (limits, say) are returned as scoring returns them.
//
// It imports ingest and scoring; it does no network I/O of its own.
package fleet
