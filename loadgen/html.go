package loadgen

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// HTMLReport returns a self-contained HTML page for r: the configuration,
// the summary, and two inline SVG charts (the rate in each second of the
// window, and the latency distribution). It loads nothing from elsewhere.
func HTMLReport(r *Result) string {
	var summary strings.Builder
	r.WriteSummary(&summary)
	data := struct {
		R        *Result
		Summary  string
		Timeline template.HTML
		Latency  template.HTML
	}{r, summary.String(), timelineSVG(r), latencySVG(r)}
	var b strings.Builder
	if err := reportPage.Execute(&b, data); err != nil {
		return "<!doctype html><p>report failed: " + template.HTMLEscapeString(err.Error())
	}
	return b.String()
}

var reportPage = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>rally bench {{.R.Scenario}}</title>
<style>
body{font:15px/1.4 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
pre{background:#f4f4f4;padding:1em;overflow:auto}
figure{margin:1.5em 0} figcaption{font-weight:600;margin-bottom:.4em}
svg text{font:12px system-ui,sans-serif;fill:#444}
</style></head><body>
<h1>rally bench {{.R.Scenario}}</h1>
<p>{{.R.URL}}, started {{.R.Started.Format "2006-01-02 15:04:05 MST"}}</p>
<pre>{{.Summary}}</pre>
{{if .Timeline}}<figure><figcaption>{{.R.Unit}} per second</figcaption>{{.Timeline}}</figure>{{end}}
{{if .Latency}}<figure><figcaption>latency distribution (share of samples, log scale of time)</figcaption>{{.Latency}}</figure>{{end}}
</body></html>
`))

const (
	chartW, chartH = 720, 260
	padL, padB     = 70, 30
	padT, padR     = 10, 10
)

// timelineSVG draws the count of each second as a line.
func timelineSVG(r *Result) template.HTML {
	if len(r.Timeline) < 2 {
		return ""
	}
	top := 0.0
	for _, v := range r.Timeline {
		top = math.Max(top, float64(v))
	}
	top = niceCeil(top)
	var b strings.Builder
	svgOpen(&b)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		y := float64(padT) + plotH*(1-v/top)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, y, chartW-padR, y, padL-6, y+4, Count(v))
	}
	var pts []string
	n := len(r.Timeline)
	for i, v := range r.Timeline {
		x := float64(padL) + plotW*float64(i)/float64(n-1)
		y := float64(padT) + plotH*(1-float64(v)/top)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#2a6ebb" stroke-width="2" points="%s"/>`, strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text x="%d" y="%d">1 s</text><text x="%d" y="%d" text-anchor="end">%d s</text>`,
		padL, chartH-8, chartW-padR, chartH-8, n)
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// latencySVG draws the latency histogram as bars on a logarithmic time axis.
func latencySVG(r *Result) template.HTML {
	bk := r.Latency.Buckets
	if len(bk) == 0 {
		return ""
	}
	lo := math.Log10(math.Max(bk[0].UpToMicros/1.1, 0.1))
	hi := math.Log10(bk[len(bk)-1].UpToMicros * 1.1)
	if hi-lo < 1 {
		hi = lo + 1
	}
	var total, peak uint64
	for _, x := range bk {
		total += x.Count
		peak = max(peak, x.Count)
	}
	var b strings.Builder
	svgOpen(&b)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	xOf := func(us float64) float64 { return float64(padL) + plotW*(math.Log10(us)-lo)/(hi-lo) }
	for d := math.Floor(lo); d <= hi; d++ {
		if d < lo {
			continue
		}
		x := xOf(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x, padT, x, chartH-padB, x, chartH-10, Micros(math.Pow(10, d)))
	}
	prev := math.Pow(10, lo)
	for _, x := range bk {
		lower := math.Max(prev, x.UpToMicros/1.0625)
		x0, x1 := xOf(lower), xOf(x.UpToMicros)
		h := plotH * float64(x.Count) / float64(peak)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2a6ebb"><title>up to %s: %.2f%%</title></rect>`,
			x0, float64(padT)+plotH-h, math.Max(x1-x0, 1), h, Micros(x.UpToMicros), 100*float64(x.Count)/float64(total))
		prev = x.UpToMicros
	}
	for _, p := range []struct {
		name string
		us   float64
	}{{"p50", r.Latency.P50}, {"p99", r.Latency.P99}} {
		if p.us <= 0 {
			continue
		}
		x := xOf(p.us)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c0392b" stroke-dasharray="4 3"/><text x="%.1f" y="%d">%s %s</text>`,
			x, padT, x, chartH-padB, x+3, padT+12, p.name, Micros(p.us))
	}
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

func svgOpen(b *strings.Builder) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, padL, chartH-padB, chartW-padR, chartH-padB)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
