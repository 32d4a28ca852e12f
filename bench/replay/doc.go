// Package replay replays a trace into a fleet of simulated engines under a
// routing policy (Play) and compares policies on it (Compare, Report): the
// engines' hit rate against the pooled ceiling, TTFT, balance, Route
// latency, and, with replicas, the gateway's and NATS's figures. The
// processes it runs against (router, replicas, NATS, fleet) come from
// bench/harness; the round-robin gateway in front of replicas is here
// because its Chooser is a policy of the player.
package replay
