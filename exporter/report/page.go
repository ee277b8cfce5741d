package report

// pageHTML is the report page. It loads nothing: the Content-Security-Policy
// allows inline styles and data: images only, and there is no script.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="bpfbench">
<title>{{.Title}}</title>
<style>
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--accent:#0969da;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI","Noto Sans",Helvetica,Arial,sans-serif;color:var(--fg);background:#fff}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
header.top{border-bottom:1px solid var(--line);padding-bottom:14px;margin-bottom:18px}
h1{font-size:22px;margin:0 0 4px;font-weight:600;word-break:break-all}
h2{font-size:17px;margin:32px 0 10px;font-weight:600;border-bottom:1px solid var(--line);padding-bottom:6px}
h3{font-size:14px;margin:16px 0 6px;font-weight:600}
.sub{color:var(--muted)}
.settings{display:flex;flex-wrap:wrap;gap:6px 18px;margin-top:10px;color:var(--muted);font-size:13px}
.settings b{color:var(--fg);font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px;margin:16px 0 4px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 14px;background:#fff}
.card .label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:21px;font-weight:600;margin-top:2px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.card .csub{font-size:12px;color:var(--muted)}
.card.cause .value{white-space:normal;font-size:18px}
.card.ok{border-left:4px solid var(--ok)}.card.warn{border-left:4px solid var(--warn)}.card.bad{border-left:4px solid var(--bad)}
.diagnosis{background:#fff8e6;border:1px solid #f0d58a;border-radius:8px;padding:10px 16px;margin:16px 0}
.diagnosis ul{margin:4px 0;padding-left:20px}.diagnosis li{margin:3px 0}
.diagnosis h2{border:0;margin:4px 0;padding:0;font-size:15px}
.grid2{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:20px}
@media (max-width:900px){.grid2{grid-template-columns:minmax(0,1fr)}}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th.wrap{white-space:normal}
tr.weak td{color:var(--muted)}
.activity{margin-top:14px}
table.kv td:first-child{color:var(--muted);width:55%}
table.kv td:last-child{text-align:right;font-variant-numeric:tabular-nums}
.figure{border:1px solid var(--line);border-radius:8px;padding:10px 12px;background:#fff}
.figure h3{margin:0 0 6px}
.figure svg{display:block;width:100%;height:auto}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:4px 0 8px;font-size:13px}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:5px}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;color:#fff;white-space:nowrap}
.st-ok{background:var(--ok)}.st-warn{background:var(--warn)}.st-bad{background:var(--bad)}.st-info{background:#6e7781}
.note{color:var(--muted);font-size:13px;margin:6px 0}
.empty{color:var(--muted);font-style:italic}
.sections{display:grid;grid-template-columns:minmax(0,1fr);gap:14px}
.section{border:1px solid var(--line);border-radius:8px;padding:8px 14px 12px;min-width:0}
table.ct{font-size:12px}
table.ct th,table.ct td{padding:4px 5px}
table.ct th{white-space:normal;overflow-wrap:normal;vertical-align:bottom}
table.ct th.g{text-align:center;border-bottom:1px solid #afb8c1;border-left:2px solid #fff;border-right:2px solid #fff}
table.ct td{overflow-wrap:anywhere}
.section h3{margin:4px 0 8px}
.section .facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:2px 20px;font-size:13px;margin-bottom:8px}
.section .facts div{display:flex;justify-content:space-between;border-bottom:1px dotted var(--line);padding:2px 0}
.section .facts span:first-child{color:var(--muted);margin-right:10px}
.section .facts span:last-child{font-variant-numeric:tabular-nums;text-align:right}
.unavail{color:var(--bad)}
tr.warn-row td{color:var(--bad);font-weight:600;background:#fff5f5}
.scroll{overflow-x:auto}
svg text{font-family:inherit}
svg .grid{stroke:#eaeef2;stroke-width:1}
svg .axis{stroke:#8c959f;stroke-width:1}
svg .tick{font-size:11px;fill:#59636e}
svg .axis-label{font-size:12px;fill:#59636e}
svg .vertical{writing-mode:vertical-rl;transform-box:fill-box}
svg .bar{fill:#54aeff}
svg .bar:hover{fill:#0969da}
svg .marker{stroke-width:1.5;stroke-dasharray:4 3}
svg .m-p50{stroke:#0b3d91;fill:#0b3d91}svg .m-p99{stroke:#d1242f;fill:#d1242f}svg .m-base{stroke:#1a7f37;fill:#1a7f37}
svg .marker-label{font-size:11px;stroke:none;font-weight:600}
svg .row-label{font-size:13px;font-weight:600;fill:#1f2328}
svg .row-sub{font-size:11px;fill:#59636e}
svg .seg{stroke:#fff;stroke-width:1}
svg .seg-label{font-size:12px;fill:#fff;font-weight:600;pointer-events:none}
svg .bar-none{fill:#f6f8fa;stroke:#d1d9e0}
svg .seg-none,svg .empty-text{font-size:12px;fill:#59636e;font-style:italic}
svg .empty-frame{fill:#fbfcfd;stroke:#d1d9e0;stroke-dasharray:4 3}
svg .tl-line{fill:none;stroke-width:1.8}
svg .dashed{stroke-dasharray:5 4}
svg .tl-area{opacity:.12;stroke:none}
svg .panel-title{font-size:12px;font-weight:600;fill:#1f2328}
svg .legend-text{font-size:12px;fill:#1f2328}
svg .phase-band{fill:#f3f4f6}
svg .phase-edge{stroke:#afb8c1;stroke-dasharray:2 3}
svg .phase-label{font-size:12px;font-weight:600;fill:#57606a}
svg.mini-bar{width:160px;height:12px;display:block}
footer{margin-top:36px;color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding-top:10px}
@media print{main{max-width:none;padding:0}.figure,.section,.card{break-inside:avoid}}
</style>
</head>
<body>
<main>
<header class="top">
<h1>{{.Title}}</h1>
{{if .Subtitle}}<div class="sub">{{.Subtitle}}</div>{{end}}
{{if .Settings}}<div class="settings" id="settings">{{range .Settings}}<span>{{.Name}}: <b>{{.Value}}</b></span>{{end}}</div>{{end}}
</header>

<section class="cards" id="headline">
{{range .Cards}}<div class="card {{.Class}}"><div class="label">{{.Label}}</div><div class="value">{{if .Color}}<span class="swatch" style="background-color: {{.Color}}"></span>{{end}}{{.Value}}</div><div class="csub">{{.Sub}}</div></div>
{{end}}</section>

<section class="diagnosis" id="diagnosis">
<h2>Diagnosis</h2>
{{if .Diagnosis}}<ul>{{range .Diagnosis}}<li>{{.}}</li>{{end}}</ul>{{else}}<p class="empty">Nothing to report.</p>{{end}}
</section>

<h2 id="summary">Serving benchmark result</h2>
<div class="grid2">
<div>
<h3>Requests and throughput</h3>
{{if .Throughput}}<table class="kv" id="table-throughput"><tbody>
{{range .Throughput}}<tr><td>{{.Name}}</td><td>{{.Value}}</td></tr>
{{end}}</tbody></table>{{else}}<p class="empty">No load figures.</p>{{end}}
</div>
<div>
<h3>Latency (ms)</h3>
{{if .NoLatency}}<p class="empty">No latency figures.</p>{{else}}<table id="table-latency"><thead><tr><th></th>{{range .LatencyCols}}<th class="n">{{.}}</th>{{end}}</tr></thead><tbody>
{{range .LatencyRows}}<tr><th>{{.Name}}</th>{{range .Cells}}<td class="n">{{.}}</td>{{end}}</tr>
{{end}}</tbody></table>
<p class="note">TTFT: time to first token. TPOT: time per output token after the first. ITL: inter-token latency (gap between streamed chunks). E2EL: end-to-end latency.</p>{{end}}
</div>
</div>

<h2 id="distributions">Distributions</h2>
<div class="grid2">
<div class="figure"><h3>Time to first token</h3>{{.TTFTChart}}</div>
<div class="figure"><h3>Inter-token gaps</h3>{{.ITLChart}}</div>
</div>

<h2 id="attribution">Attribution: what the excess latency is made of, on the critical path</h2>
<div class="legend" id="legend">{{range .Causes}}<span><span class="swatch" style="background-color: {{.Color}}"></span>{{.Label}} <span class="sub">({{.Name}})</span></span>{{end}}</div>
{{if .HasAttribution}}<p class="note" id="note-attribution">Each interval (a time to first token or an inter-token gap) is walked back along its critical path and split into the parts that delayed it: the server's threads running, waiting for a CPU, the disk or the GPU, sleeping, the chunk in flight on the network, in the client's socket; the parts of each gap sum to it. Each bar splits the latency above the normal gap ({{.Baseline}}) into those parts, as shares of the band's excess. Bands hold the gaps between two percentiles of the run's inter-token gaps.</p>{{end}}
<div class="figure">{{.AttrChart}}</div>
{{if .AttrRows}}<div class="scroll"><table id="table-attribution"><thead><tr><th>band</th><th class="n">gaps</th><th class="n">range</th><th class="n">excess</th>{{range .Causes}}<th class="n wrap" title="{{.Name}}">{{.Label}}</th>{{end}}</tr></thead><tbody>
{{range .AttrRows}}<tr><td>{{.Label}}</td><td class="n">{{.Gaps}}</td><td class="n">{{.Range}}</td><td class="n">{{.Excess}}</td>{{range .Shares}}<td class="n">{{.}}</td>{{end}}</tr>
{{end}}</tbody></table></div>{{end}}

<h2 id="timeline">Timeline</h2>
<div class="figure">{{.Timeline}}</div>

{{if .Phases}}<h2 id="phases">Phases</h2>
<div class="scroll"><table id="table-phases"><thead><tr><th>phase</th><th class="n">seconds</th><th class="n">requests</th><th class="n">ITL p50</th><th class="n">ITL p99</th><th class="n">TTFT p99</th><th title="on the critical path: for a later phase, the cause that added most to its slowest 10% of gaps over the first phase's; for the first, the top cause of its slowest 1%">top cause</th><th>p99 gaps' excess</th>{{if .HasInjection}}<th>injected</th><th>verdict</th>{{end}}</tr></thead><tbody>
{{range .Phases}}<tr{{if .Weak}} class="weak"{{end}}><td>{{.Name}}</td><td class="n">{{.Span}}</td><td class="n">{{.Requests}}</td><td class="n">{{.P50}}</td><td class="n">{{.P99}}</td><td class="n">{{.TTFT99}}</td><td class="top">{{if .TopColor}}<span class="swatch" style="background-color: {{.TopColor}}"></span>{{end}}<span class="top-cause">{{.Top}}</span>{{if .TopShare}} <span class="sub top-share">{{.TopShare}}</span>{{end}}{{if .Basis}}<div class="sub basis">{{.Basis}}</div>{{end}}</td><td>{{.Bar}}</td>{{if $.HasInjection}}<td class="injection">{{.Injection}}</td><td class="verdict">{{.Verdict}}</td>{{end}}</tr>
{{end}}</tbody></table></div>
<p class="note">The top cause and its share are the critical path's; the bar splits the phase's slowest 1% of gaps' excess along their critical paths.</p>{{end}}

{{if .Gateway}}<h2 id="gateway">Gateway</h2>
<ul id="list-gateway">{{range .Gateway}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .CriticalPath}}<h2 id="critical-path">Critical path</h2>
<ul id="list-critical-path">{{range .CriticalPath}}<li>{{.}}</li>{{end}}</ul>
{{if .Neighbours}}<table class="kv" id="table-noisy-neighbours"><tbody>
{{range .Neighbours}}<tr><td>{{.Name}}</td><td>{{.Value}}</td></tr>
{{end}}</tbody></table>{{end}}
<p class="note">Each gap walked back from the client's read: the chunk in the client's socket, in flight from the server's send, and before the send the sending thread's states, following the wakeups that ended its sleeps. Every gap's parts sum to the gap (result.json: critical_path).</p>{{end}}

{{if .ServerMetrics}}<h2 id="server-metrics">Server metrics (the engine's own /metrics)</h2>
<div class="grid2">
<div><table class="kv" id="table-server-metrics"><tbody>
{{range .ServerMetrics}}<tr{{if .Warn}} class="warn-row"{{end}}><td>{{.Name}}</td><td>{{.Value}}</td></tr>
{{end}}</tbody></table></div>
<div>{{if .ServerQueue}}<table class="kv" id="table-server-queue"><tbody>
{{range .ServerQueue}}<tr{{if .Warn}} class="warn-row"{{end}}><td>{{.Name}}</td><td>{{.Value}}</td></tr>
{{end}}</tbody></table>
<p class="note">Server queue: each request's wait for a slot, replayed in send order over the engine's slots (its peak of requests running) and counted only while the engine reported requests waiting; capped at the request's TTFT.</p>{{end}}</div>
</div>
<div class="figure">{{.ServerMetricsChart}}</div>{{end}}

{{if .Requests}}<h2 id="requests">Slowest requests by excess latency</h2>
<div class="scroll"><table id="table-requests"><thead><tr><th class="n">request</th><th class="n">TTFT</th><th class="n">ITL excess</th><th class="n">total excess</th><th>top cause</th><th>blame</th></tr></thead><tbody>
{{range .Requests}}<tr><td class="n">{{.Request}}</td><td class="n">{{.TTFT}}</td><td class="n">{{.ITLExcess}}</td><td class="n">{{.Total}}</td><td class="top"><span class="swatch" style="background-color: {{.TopColor}}"></span><span class="top-cause">{{.Top}}</span></td><td class="blame">{{.Bar}}</td></tr>
{{end}}</tbody></table></div>
<p class="note">Each request's blame bar splits its excess over the normal gap (its TTFT's and its gaps') along their critical paths; the parts sum to the total excess.</p>
{{if .RequestsMore}}<p class="note">{{.RequestsMore}} more requests in result.json.</p>{{end}}{{end}}

<h2 id="collectors">Collectors</h2>
{{if .Sections}}<div class="sections">
{{range .Sections}}<div class="section" id="section-{{.Name}}">
<h3>{{.Title}}{{if .Cause}} <span class="sub">→ {{.Cause}}</span>{{end}}</h3>
{{if .Unavailable}}<p class="unavail">Could not run: {{.Unavailable}}</p>{{end}}
{{if .Error}}<p class="unavail">{{.Error}}</p>{{end}}
{{if .Facts}}<div class="facts">{{range .Facts}}<div><span>{{.Name}}</span><span>{{.Value}}</span></div>{{end}}</div>{{end}}
{{range .Tables}}{{$cols := .Columns}}<h3>{{.Title}}</h3><div class="scroll"><table class="ct"><thead>{{range .Heads}}<tr>{{range .}}<th{{if .Group}} class="g"{{else if .Num}} class="n"{{end}}{{if gt .Colspan 1}} colspan="{{.Colspan}}"{{end}}{{if gt .Rowspan 1}} rowspan="{{.Rowspan}}"{{end}}{{if .Title}} title="{{.Title}}"{{end}}>{{.Text}}</th>{{end}}</tr>{{end}}</thead><tbody>
{{range .Rows}}<tr>{{range $i, $c := .}}<td{{if (index $cols $i).Num}} class="n"{{end}}>{{$c}}</td>{{end}}</tr>
{{end}}</tbody></table></div>{{if .More}}<p class="note">{{.More}} more rows in result.json.</p>{{end}}
{{end}}{{if and .Empty (not .Unavailable)}}<p class="empty">No data.</p>{{end}}
</div>
{{end}}</div>{{else}}<p class="empty">No collector ran (load only).</p>{{end}}
{{with .Activity}}<div class="activity" id="activity">
<h3>What else was active (overlapping activity, not blame)</h3>
<p class="note">Which collectors saw activity overlapping the intervals, as shares of the excess it overlapped (result.json: activity). Activity during a gap did not necessarily delay it: the causes are the critical path's, above.</p>
<div class="scroll"><table class="ct" id="table-activity"><thead><tr><th>intervals</th><th class="n">gaps</th><th class="n">range</th><th class="n">excess</th>{{range .Names}}<th class="n">{{.}}</th>{{end}}</tr></thead><tbody>
{{range .Rows}}<tr><td>{{.Label}}</td><td class="n">{{.Gaps}}</td><td class="n">{{.Range}}</td><td class="n">{{.Excess}}</td>{{range .Shares}}<td class="n">{{.}}</td>{{end}}</tr>
{{end}}</tbody></table></div>
</div>{{end}}

<h2 id="collection">Collection and readiness</h2>
{{if .NoCollect}}<p class="empty">The kernel side did not run: this result holds the load generator's figures only.</p>{{else}}
<div class="grid2">
<div><table class="kv" id="table-collection"><tbody>
{{range .Collection}}<tr{{if .Warn}} class="warn-row"{{end}}><td>{{.Name}}</td><td>{{.Value}}</td></tr>
{{end}}</tbody></table>
{{if .Unavailable}}<h3>Unavailable sections</h3><table class="kv" id="table-unavailable"><tbody>{{range .Unavailable}}<tr><td>{{.Name}}</td><td class="unavail">{{.Value}}</td></tr>{{end}}</tbody></table>{{end}}
</div>
<div>{{if .Readiness}}<table id="table-readiness"><thead><tr><th>status</th><th>check</th><th>detail</th></tr></thead><tbody>
{{range .Readiness}}<tr><td><span class="badge {{.Class}}">{{.Status}}</span></td><td>{{.Name}}</td><td>{{.Detail}}{{if .Fix}}<div class="sub">fix: {{.Fix}}</div>{{end}}</td></tr>
{{end}}</tbody></table>{{else}}<p class="empty">No readiness checks recorded.</p>{{end}}</div>
</div>{{end}}

<footer>Generated by bpfbench from result.json. The per-event timeline is in trace.json (open it in ui.perfetto.dev or chrome://tracing).</footer>
</main>
</body>
</html>
`
