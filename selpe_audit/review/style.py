"""The stylesheet of review.html, inlined in the page (the CSP allows inline styles only)."""

STYLE = """
:root{--ink:#1d2430;--muted:#5b6675;--line:#dde3ea;--bg:#f5f7fa;--card:#fff;--ok:#3566a8;
--low:#e3a21a;--neg:#c8453b;--good:#1f7a4d;--bad:#b3261e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1320px;margin:0 auto;padding:0 24px 48px}
header.untrusted{display:flex;gap:18px;align-items:flex-start;background:#fff4e5;
border-bottom:3px solid #e3a21a;padding:18px 32px}
header h1{margin:0 0 6px;font-size:22px}header p{margin:4px 0;max-width:1100px}
.badge{background:var(--bad);color:#fff;font-weight:700;padding:6px 10px;border-radius:4px;
letter-spacing:.05em;white-space:nowrap;margin-top:2px}
nav{position:sticky;top:0;z-index:2;background:#1d2430;padding:8px 32px;display:flex;
gap:18px;flex-wrap:wrap}
nav a{color:#e6edf5;text-decoration:none;font-weight:600;font-size:13px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;
margin:20px 0;padding:16px 22px}
h2{margin:0 0 12px;font-size:19px}h3{margin:18px 0 8px;font-size:16px}
h4{margin:14px 0 6px;font-size:14px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top;
overflow-wrap:break-word}
table.kv td{overflow-wrap:anywhere}.num{white-space:nowrap;font-variant-numeric:tabular-nums}
thead th{background:#eef2f7;font-size:12px;text-transform:uppercase;letter-spacing:.03em;
color:var(--muted)}
table.kv th{width:45%;font-weight:600;color:var(--muted)}
table.ledger .mono{overflow-wrap:normal}
table.ledger tr:last-child td{border-top:2px solid var(--ink);background:#f7f9fb}
table.warn td:first-child{width:24%}
details summary{cursor:pointer;font-weight:600;margin:8px 0}
.wk{background:#fdecc8;border-radius:3px;padding:1px 6px;font-size:12px;font-weight:600}
.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px;
overflow-wrap:anywhere}
.small{font-size:11.5px}.muted{color:var(--muted)}.good{color:var(--good)}
.bad{color:var(--bad);font-weight:600}
.tiles{display:flex;gap:14px;flex-wrap:wrap;margin-bottom:8px}
.tile{border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:170px;
background:#fafbfd}
.tile .tv{font-size:24px;font-weight:700}.tile .tl{color:var(--muted);font-size:12px}
.tile.good .tv{color:var(--good)}.tile.bad .tv{color:var(--bad)}
.grid3{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:22px}
.grid2{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:26px}
ul.words li{margin:6px 0;font-size:15px}ul.refs{font-size:12px;color:var(--muted)}
.chartbox{overflow-x:auto;margin:4px 0 10px}
.hist{border-top:1px dashed var(--line);padding-top:4px}
.legend{color:var(--muted);font-size:12.5px}.legend svg{vertical-align:-2px;margin-left:10px}
svg.chart text{font-size:12px;fill:var(--ink)}
svg.chart .rowlabel{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:11.5px}
svg.chart .colhead{font-weight:700;font-size:12.5px}
svg.chart .stripe{fill:#f6f8fb}svg.chart .sep{stroke:var(--line)}
svg.chart .zero{stroke:#8a94a3;stroke-width:1}
.bar.ok{fill:var(--ok)}.bar.low{fill:var(--low)}.bar.neg{fill:var(--neg)}
svg.chart .val{font-variant-numeric:tabular-nums}
svg.chart .val.neg{fill:var(--neg)}svg.chart .val.low{fill:#9a6a00}
svg.chart .val.muted{fill:var(--muted);font-style:italic}
.st-verified{color:var(--good);font-weight:700}.st-invalid{color:var(--bad);font-weight:700}
.st-unchecked{color:var(--muted);font-weight:700}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:10px}
.rec{border:1px solid var(--line);border-left:4px solid var(--ok);border-radius:6px;
padding:8px 10px;background:#fbfcfe}
.rec.partner{border-left-color:#7a5aa8}
.rtext{font-size:14.5px;margin:6px 0}.fname{color:var(--muted);font-size:11px;
font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.chips{display:flex;flex-wrap:wrap;gap:4px 10px;font-size:12.5px}
.chip{white-space:nowrap}h3.round{border-top:1px solid var(--line);padding-top:12px}
.role{font-size:11px;font-weight:700;border-radius:3px;padding:1px 6px;white-space:nowrap}
.role.winner{background:#dbe7f7}.role.partner{background:#ebe3f5}
.pii{background:#fde2df;outline:2px solid var(--neg);border-radius:2px}
pre{background:#f3f5f8;padding:8px;overflow-x:auto;white-space:pre-wrap}
code{background:#f0f2f5;padding:0 4px;border-radius:3px}
footer{color:var(--muted);font-size:12px;text-align:center;margin:24px 0}
"""
