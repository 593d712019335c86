package conform

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
)

// htmlTraceEntries is how much of each trace the page shows; the case's
// JSON file has the rest.
const htmlTraceEntries = 40

// indexEntry is one case's line in index.json.
type indexEntry struct {
	ID            string  `json:"id"`
	Verdict       Verdict `json:"verdict"`
	Behavior      Verdict `json:"behavior"`
	CloseBehavior Verdict `json:"closeBehavior"`
	DurationMS    float64 `json:"durationMs"`
	File          string  `json:"file"`
}

type index struct {
	*Report
	Counts  map[Verdict]int `json:"counts"`
	Summary string          `json:"summary"`
	Passed  bool            `json:"passed"`
	Cases   []indexEntry    `json:"cases"`
}

func caseFile(id string) string { return filepath.Join("cases", id+".json") }

// Write writes the report into dir (created if needed): index.json with the
// counts and one line per case, cases/<id>.json with each case's Result,
// and index.html, a page that shows the cases as a grid coloured by verdict,
// each opening to what was sent and observed. Existing files of the same
// names are replaced.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "cases"), 0o755); err != nil {
		return fmt.Errorf("conform: report: %w", err)
	}
	c := r.Counts()
	idx := index{Report: r, Summary: c.String(), Passed: r.Passed(), Counts: map[Verdict]int{
		OK: c.OK, NonStrict: c.NonStrict, Informational: c.Informational, Unimplemented: c.Unimplemented, Failed: c.Failed,
	}}
	for _, res := range r.Results {
		idx.Cases = append(idx.Cases, indexEntry{ID: res.ID, Verdict: res.Verdict, Behavior: res.Behavior,
			CloseBehavior: res.CloseBehavior, DurationMS: res.DurationMS, File: filepath.ToSlash(caseFile(res.ID))})
		if err := writeJSON(filepath.Join(dir, caseFile(res.ID)), res); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, "index.json"), idx); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return fmt.Errorf("conform: report: %w", err)
	}
	if err := page.Execute(f, pageData{Report: r, Summary: c.String(), Sections: sections(r.Results)}); err != nil {
		f.Close()
		return fmt.Errorf("conform: report: %w", err)
	}
	return f.Close()
}

func writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("conform: report: %w", err)
	}
	if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("conform: report: %w", err)
	}
	return nil
}

type section struct {
	Name    string
	Results []Result
}

type pageData struct {
	*Report
	Summary  string
	Sections []section
}

var sectionNames = map[string]string{
	"1": "Framing", "2": "Pings and pongs", "3": "Reserved bits", "4": "Opcodes",
	"5": "Fragmentation", "6": "UTF-8", "7": "Close handshake", "9": "Limits and throughput",
	"10": "Miscellaneous", "12": "permessage-deflate: messages", "13": "permessage-deflate: parameters",
}

func sections(results []Result) []section {
	var out []section
	for _, r := range results {
		num, _, _ := strings.Cut(r.ID, ".")
		name := num + " " + sectionNames[num]
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, section{Name: name})
		}
		out[len(out)-1].Results = append(out[len(out)-1].Results, r)
	}
	return out
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"cls":  func(v Verdict) string { return strings.ToLower(strings.ReplaceAll(string(v), "-", "")) },
	"head": func(t []TraceEntry) []TraceEntry { return t[:min(len(t), htmlTraceEntries)] },
	"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>conform: {{.Agent}} ({{.Mode}})</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 1em 0 .3em; }
.grid { display: flex; flex-wrap: wrap; gap: 3px; }
.grid a { display: inline-block; min-width: 4.2em; padding: 2px 4px; text-align: center; text-decoration: none; color: #000; border-radius: 3px; font-size: 12px; }
.ok { background: #7fd17f; } .informational { background: #9cc3ef; } .unimplemented { background: #c8b4e6; }
.nonstrict { background: #f2d46b; } .failed { background: #f08080; }
details { margin: 2px 0; border-left: 6px solid #ccc; padding-left: .5em; }
details.ok { border-color: #3a3; background: none; } details.informational { border-color: #48c; background: none; }
details.unimplemented { border-color: #86c; background: none; } details.nonstrict { border-color: #cb2; background: none; }
details.failed { border-color: #c33; background: none; }
summary { cursor: pointer; } code, td.hex { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
table { border-collapse: collapse; margin: .3em 0; } td, th { border: 1px solid #ddd; padding: 1px 5px; vertical-align: top; text-align: left; }
.legend span { padding: 2px 6px; border-radius: 3px; margin-right: 4px; }
</style></head><body>
<h1>WebSocket conformance: {{.Agent}} as {{.Mode}} ({{.Target}})</h1>
<p><b>{{.Summary}}</b><br>Started {{.Started.Format "2006-01-02 15:04:05 MST"}}, took {{printf "%.1f" .DurationMS}} ms.</p>
<p class="legend"><span class="ok">OK</span><span class="nonstrict">NON-STRICT</span><span class="informational">INFORMATIONAL</span><span class="unimplemented">UNIMPLEMENTED</span><span class="failed">FAILED</span></p>
{{range .Sections}}<h2>{{.Name}}</h2><div class="grid">{{range .Results}}<a class="{{cls .Verdict}}" href="#c{{.ID}}" title="{{.Verdict}}: {{.Description}}">{{.ID}}</a>{{end}}</div>
{{end}}
<h2>Cases</h2>
{{range .Results}}<details id="c{{.ID}}" class="{{cls .Verdict}}"><summary><b>{{.ID}}</b> {{.Verdict}}: {{.Description}}</summary>
<table>
<tr><th>Expectation</th><td>{{.Expectation}}</td></tr>
<tr><th>Behaviour</th><td>{{.Behavior}}{{range .BehaviorNotes}}<br>{{.}}{{end}}</td></tr>
<tr><th>Close behaviour</th><td>{{.CloseBehavior}}{{range .CloseNotes}}<br>{{.}}{{end}}</td></tr>
{{if .Expected}}<tr><th>Accepted</th><td>{{range .Expected}}<code>{{.}}</code><br>{{end}}</td></tr>{{end}}
<tr><th>Observed</th><td>{{range .Observed}}<code>{{.}}</code><br>{{else}}nothing{{end}}</td></tr>
<tr><th>Close</th><td>sent code {{.Close.SentCode}}{{if .Close.SentBodyHex}} (body {{.Close.SentBodyHex}}){{end}} at {{.Close.SentAtMS}} ms; received code {{.Close.ReceivedCode}}{{if .Close.ReceivedBody}} (body {{.Close.ReceivedBody}}){{end}}{{if .Close.ReceivedReason}} "{{.Close.ReceivedReason}}"{{end}} at {{.Close.ReceivedAtMS}} ms{{if .Close.PeerInitiated}} (peer first){{end}}; TCP closed by {{.Close.TCPClosedBy}}{{if .Close.TCPClosedAtMS}} at {{.Close.TCPClosedAtMS}} ms{{end}}</td></tr>
{{if .Info}}<tr><th>Measured</th><td><code>{{json .Info}}</code></td></tr>{{end}}
<tr><th>Duration</th><td>{{printf "%.1f" .DurationMS}} ms</td></tr>
</table>
<table><tr><th>ms</th><th>wire</th><th>bytes</th><th>hex</th></tr>
{{range head .Trace}}<tr><td>{{printf "%.2f" .AtMS}}</td><td>{{.Dir}}</td><td>{{.Len}}</td><td class="hex">{{.Hex}}</td></tr>
{{end}}{{if or .TraceOmitted (gt (len .Trace) 40)}}<tr><td colspan="4">… the rest is in cases/{{.ID}}.json</td></tr>{{end}}</table>
</details>
{{end}}
<script>
function openCase() { const d = document.getElementById(decodeURIComponent(location.hash.slice(1))); if (d) d.open = true; }
window.addEventListener('hashchange', openCase); openCase();
</script>
</body></html>
`))
