// Package harness starts what a benchmark runs against: the router binary
// as a subprocess on free loopback ports (LaunchRouter, StartRouter), N
// router replicas sharing an embedded NATS server (StartReplicas,
// StartNATS), the gRPC gateway that spreads Routes and marks over replicas
// (NewGateway), and a fleet of simulated engines registered with the router
// (StartFleet). Everything talks to the router the way production does:
// gRPC, ZeroMQ and HTTP. The replay comparison (bench/replay), the load
// generator (bench/load), the restart scenario (bench/restart), the attack
// suite (bench/attack) and the demo (bench/demo) all build on it.
package harness
