package main

import (
	"fmt"
	"html"
	"strings"
)

// bar is one row of a bar chart.
type bar struct {
	label string
	value float64
	note  string // printed after the value, e.g. the ratio to gorilla
	kind  *peer
}

// barChart draws horizontal bars, one per peer, as a standalone SVG file:
// rally in orange, the raw TCP floor in grey, the other peers in blue.
func barChart(title, axis string, bars []bar, format func(float64) string) string {
	const (
		width  = 760
		labelW = 110
		valueW = 190
		rowH   = 26
		top    = 46
	)
	height := top + rowH*len(bars) + 16
	max := 0.0
	for _, b := range bars {
		if b.value > max {
			max = b.value
		}
	}
	if max <= 0 {
		max = 1
	}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`, width, height, width, height)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="#fff"/>`)
	fmt.Fprintf(&s, `<text x="10" y="20" font-weight="bold">%s</text><text x="10" y="38" fill="#555">%s</text>`, html.EscapeString(title), html.EscapeString(axis))
	plot := float64(width - labelW - valueW)
	for i, b := range bars {
		y := top + i*rowH
		color := "#2a6ebb"
		switch {
		case b.kind != nil && b.kind.Verbatim:
			color = "#9a9a9a"
		case b.kind != nil && b.kind.Name == "rally":
			color = "#d35400"
		}
		w := plot * b.value / max
		if w < 1 {
			w = 1
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text>`, labelW-8, y+17, html.EscapeString(b.label))
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelW, y+4, w, rowH-8, color)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d">%s  (%s)</text>`, float64(labelW)+w+6, y+17, html.EscapeString(format(b.value)), html.EscapeString(b.note))
	}
	s.WriteString("</svg>\n")
	return s.String()
}
