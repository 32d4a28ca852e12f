// Package deploy holds what operators deploy beside the router: the
// Prometheus alert rules and their promtool unit tests (prometheus/), the
// Grafana dashboard (grafana/). Its Go tests run promtool over the rules,
// check that every alert is tested both ways and documented, and that every
// dashboard query names a metric kvrouter (or the engine it cites) exports.
package deploy
