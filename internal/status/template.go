package status

import "html/template"

// pageTemplate is the whole page: styles inline, the sparkline an inline
// SVG, nothing fetched.
var pageTemplate = template.Must(template.New("status").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{if gt .Refresh 0}}<meta http-equiv="refresh" content="{{.Refresh}}">
{{end}}<title>kvrouter status</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em 2em;color:#1d2433;background:#f7f8fa}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .5em}
.sub{color:#5b6478;margin:0 0 1em}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08)}
th,td{padding:.3em .7em;text-align:left;border-bottom:1px solid #e6e8ee;vertical-align:top;white-space:nowrap}
td.problems{white-space:normal;max-width:32em}
th{background:#eef0f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#137333}.warn{color:#a05a00;font-weight:600}.bad{color:#b3261e;font-weight:600}
.tiles{display:flex;gap:1em;flex-wrap:wrap}.tile{background:#fff;padding:.6em 1em;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.tile b{display:block;font-size:1.5em}
svg{background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.legend span{margin-right:1.5em}.hit{color:#1a73e8}.rr{color:#9aa0a6}
table.cands{box-shadow:none;font-size:.9em}table.cands td,table.cands th{padding:.1em .5em}
tr.chosen td{font-weight:600}
.empty{color:#5b6478;font-style:italic}
</style>
</head>
<body>
<h1>kvrouter status</h1>
<p class="sub">at <time id="now">{{.Now}}</time></p>

<div class="tiles" id="summary">
<div class="tile">workers<b id="n-workers">{{.Workers}}</b></div>
<div class="tile">ranks connected<b id="n-connected">{{.Connected}} / {{len .Ranks}}</b></div>
<div class="tile">ranks inexact<b id="n-inexact" class="{{if .Inexact}}warn{{else}}ok{{end}}">{{.Inexact}}</b></div>
<div class="tile">ranks refusing events<b id="n-problems" class="{{if .Sick}}warn{{else}}ok{{end}}">{{.Sick}}</b></div>
{{if .HasLog}}<div class="tile">routing gain<b id="gain">{{.Gain.Gain}}</b></div>{{end}}
</div>

<h2>Workers and ranks</h2>
{{if .Ranks}}<table id="ranks">
<thead><tr><th>worker</th><th>rank</th><th>model</th><th>connected</th><th>last seq</th><th>lag</th><th>cached blocks</th><th>capacity</th><th>state</th><th>problems</th></tr></thead>
<tbody>
{{range .Ranks}}<tr data-worker="{{.Worker}}" data-rank="{{.DPRank}}">
<td>{{.Worker}}</td><td class="num">{{.DPRank}}</td><td>{{.Model}}</td>
<td class="{{if .Connected}}ok{{else}}bad{{end}}">{{if .Connected}}yes{{else}}no{{end}}</td>
<td class="num">{{.LastSeq}}</td><td class="num">{{.Lag}}</td>
<td class="num cached">{{.Cached}}</td><td class="num">{{.Capacity}}</td>
<td class="state {{.Class}}">{{.State}}{{if .Restore}} (restore: {{.Restore}}){{end}}</td>
<td class="problems">{{range .Problems}}<div title="{{.Detail}}">{{.Reason}} × {{.Count}}{{if .Detail}}: {{.Detail}}{{end}}</div>{{end}}</td>
</tr>
{{end}}</tbody>
</table>
{{else}}<p class="empty" id="ranks-empty">No workers registered.</p>
{{end}}
{{if .HasLog}}
<h2>Routing gain</h2>
<p class="legend"><span class="hit">■ router hit rate <b id="hit-rate">{{.Gain.HitRate}}</b></span><span class="rr">■ round-robin estimate <b id="rr-rate">{{.Gain.RoundRobin}}</b></span><span>{{.Gain.Decisions}} decisions in {{.Gain.Samples}} × {{.Gain.Interval}}, {{.Gain.From}}–{{.Gain.To}} UTC</span></p>
<svg id="sparkline" width="{{.Gain.W}}" height="{{.Gain.H}}" viewBox="-40 -6 {{.Gain.W}} {{.Gain.H}}" role="img" aria-label="hit rate over time, router against round robin">
<text x="-6" y="4" text-anchor="end" font-size="11" fill="#5b6478">100%</text><text x="-6" y="{{.Gain.SparkH}}" text-anchor="end" font-size="11" fill="#5b6478">0%</text>
<line x1="0" y1="0" x2="{{.Gain.SparkW}}" y2="0" stroke="#eef0f5"/><line x1="0" y1="{{.Gain.SparkH}}" x2="{{.Gain.SparkW}}" y2="{{.Gain.SparkH}}" stroke="#e6e8ee"/>
<path id="rr-line" d="{{.Gain.RRPath}}" fill="none" stroke="#9aa0a6" stroke-width="1.5" stroke-dasharray="4 3"/>
<path id="hit-line" d="{{.Gain.HitPath}}" fill="none" stroke="#1a73e8" stroke-width="2"/>
</svg>

<h2>Recent decisions</h2>
{{if .Decisions}}<table id="decisions">
<thead><tr><th>time (UTC)</th><th>model</th><th>request</th><th>chosen</th><th>why</th><th>matched / prompt blocks</th><th>round robin</th><th>cost</th><th>candidates: matched, prefill, decode, cost</th></tr></thead>
<tbody>
{{range .Decisions}}<tr class="decision">
<td>{{.Time}}</td><td>{{.Model}}</td><td>{{.RequestID}}</td><td class="chosen-worker">{{.Worker}}</td><td class="reason">{{.Reason}}</td>
<td class="num matched">{{.Matched}}</td><td class="num">{{.RoundRobin}}</td><td class="num">{{.Cost}}</td>
<td><table class="cands"><tbody>{{range .Candidates}}<tr{{if .Chosen}} class="chosen"{{end}}><td>{{.Worker}}</td><td class="num">{{.Matched}}</td><td class="num">{{.Prefill}}</td><td class="num">{{.Decode}}</td><td class="num">{{.Cost}}</td></tr>{{end}}</tbody></table>{{if .Omitted}}<div class="empty">and {{.Omitted}} more</div>{{end}}</td>
</tr>
{{end}}</tbody>
</table>
{{else}}<p class="empty" id="decisions-empty">No decisions yet.</p>
{{end}}{{end}}
</body>
</html>
`))
