package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// series is one bar colour of a grouped bar chart: a value per group, NaN
// where there is none.
type series struct {
	name   string
	color  string
	values []float64
}

// barChart is a grouped bar chart rendered as a standalone SVG file.
type barChart struct {
	title  string
	yLabel string
	groups []string
	series []series
}

// targetColor is the colour of a target in every chart.
func targetColor(target string) string {
	switch target {
	case targetDirect:
		return "#9a9a9a"
	case targetBareproxy:
		return "#4e79a7"
	case targetTollgate:
		return "#f28e2b"
	case targetFallback:
		return "#e15759"
	}
	return "#59a14f"
}

// Chart geometry, in SVG user units.
const (
	chartW      = 760.0
	chartH      = 380.0
	plotLeft    = 72.0
	plotRight   = 16.0
	plotTop     = 44.0
	plotBottom  = 78.0
	gridLines   = 5
	groupFill   = 0.8 // share of a group's width taken by its bars
	labelMinGap = 4.0
)

// svg renders the chart.
func (c barChart) svg() []byte {
	var b bytes.Buffer
	pw, ph := chartW-plotLeft-plotRight, chartH-plotTop-plotBottom
	top := niceCeil(c.maxValue())
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%g" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, html.EscapeString(c.title))
	// Grid and y axis labels.
	for i := 0; i <= gridLines; i++ {
		v := top * float64(i) / gridLines
		y := plotTop + ph - ph*float64(i)/gridLines
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#e3e3e3"/>`+"\n", plotLeft, y, plotLeft+pw, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", plotLeft-6, y+4, fmtNum(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle" fill="#333">%s</text>`+"\n", plotTop+ph/2, html.EscapeString(c.yLabel))
	// Bars.
	if n := len(c.groups); n > 0 && len(c.series) > 0 {
		gw := pw / float64(n)
		bw := gw * groupFill / float64(len(c.series))
		for g, name := range c.groups {
			x0 := plotLeft + gw*float64(g) + gw*(1-groupFill)/2
			for s, se := range c.series {
				if g >= len(se.values) || math.IsNaN(se.values[g]) {
					continue
				}
				v := se.values[g]
				h := 0.0
				if top > 0 {
					h = ph * v / top
				}
				x, y := x0+bw*float64(s), plotTop+ph-h
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
					x, y, math.Max(bw-1, 1), h, se.color, html.EscapeString(se.name), html.EscapeString(name), fmtNum(v))
				if bw >= 22 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#333">%s</text>`+"\n", x+bw/2, y-labelMinGap, fmtNum(v))
				}
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%s</text>`+"\n", plotLeft+gw*(float64(g)+0.5), plotTop+ph+18, html.EscapeString(name))
		}
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#888"/>`+"\n", plotLeft, plotTop+ph, plotLeft+pw, plotTop+ph)
	// Legend.
	x := plotLeft
	for _, se := range c.series {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="12" height="12" fill="%s"/>`+"\n", x, chartH-30, se.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" fill="#333">%s</text>`+"\n", x+17, chartH-20, html.EscapeString(se.name))
		x += 30 + 7*float64(len(se.name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// maxValue is the largest value of the chart, 0 when there is none.
func (c barChart) maxValue() float64 {
	m := 0.0
	for _, s := range c.series {
		for _, v := range s.values {
			if !math.IsNaN(v) && v > m {
				m = v
			}
		}
	}
	return m
}

// niceCeil rounds v up to a round multiple of a power of ten (1, 1.5, 2,
// 2.5, 3, 4, 5, 6, 8 or 10 times it), the top of a chart's axis; 1 for
// v <= 0.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// fmtNum formats a chart or table value with a precision fit for its size.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	}
	return fmt.Sprintf("%.3f", v)
}
