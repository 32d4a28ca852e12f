// Package status renders the router's /status page: server-side HTML with
// no external assets (styles and a sparkline SVG inline) showing every
// worker and rank as the router follows it, the routing gain over time
// against the round-robin estimate, and the recent routing decisions with
// their cost terms.
//
// The package imports nothing internal. Its data comes through two seams the
// wiring fills: a Source lists the ranks when the page is rendered, and the
// route path adds each decision to a DecisionLog, a bounded ring that also
// buckets hit counts by time for the gain sparkline. A Collector exports the
// Source's per-rank cached blocks as metrics, for the dashboard's comparison
// with the engines' own counts.
package status
