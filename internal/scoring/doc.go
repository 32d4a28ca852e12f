// Package scoring turns a prompt into a routing decision: it hashes the prompt
// with normalize's block hash, matches it against the radix index (plus a
// TTL-bounded overlay of the router's own recent decisions), and combines
// overlap with per-worker active load into a cost.
//
// A Route reads the clock once and goes hash -> match -> cost -> choose ->
// record. Its state is per model (model.go): a model's ranks' load, its
// learner, its guard and its overlay sit behind the model's own lock, so
// Routes of different models share no lock while they cost and record, and
// the table of routed requests (load.go) is locked only to add, mark and
// release one.
//
// One concept per file:
//
//   - config.go: Config, its defaults and Validate; flags.go: the command
//     line's Options and their conversion to a Config.
//   - router.go: the Router; model.go: a model's state and its lock;
//     registry.go: workers and their ranks per model.
//   - prompt.go: validating and hashing a prompt.
//   - candidates.go: matching a prompt and the costing pass over its
//     model's ranks; policy.go: the policies; cost_blocks.go: the blocks
//     policy's cost (and the overlap credit both use); cost_time.go: the
//     time policy's; learner.go: the time policy's learner; decay.go: the
//     learner's decay memo; pending.go: a model's pending prefills.
//   - balance.go: the bounded-load guard and the load imbalance.
//   - sample.go: choosing among the costs; spread.go: a replica's pricing
//     of the other replicas' decisions it cannot see yet.
//   - route.go: Route and what it records; decision.go: what Route answers
//     and why it chose; score.go: Score.
//   - load.go: routed requests and their load; overlay.go: predicted
//     blocks; replica.go: sharing load and predictions with replicas.
//   - errors.go: the error classes and the limits' names.
//
// It imports internal/radix, internal/normalize and internal/kv.
package scoring
