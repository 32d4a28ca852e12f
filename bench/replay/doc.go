// Package replay replays a trace into a fleet of simulated engines under a
// routing policy (Play) and compares policies on it (Compare, Report): the
// engines' hit rate against the pooled ceiling, TTFT, balance, Route
// latency, and, with replicas, the gateway's and NATS's figures. The
// processes it runs against (router, replicas, NATS, the gateway in front of
// replicas, fleet) come from bench/harness; GatewayChooser makes that
// gateway a policy of the player.
package replay
