package status

import (
	"math"
	"strconv"
)

// sparkPath returns an SVG path drawing vs (fractions, clamped to [0, 1])
// left to right across a w x h box, 1 at the top. A NaN breaks the line; a
// point with no neighbour is drawn as a short tick so it shows.
func sparkPath(vs []float64, w, h float64) string {
	if len(vs) == 0 {
		return ""
	}
	step := w
	if len(vs) > 1 {
		step = w / float64(len(vs)-1)
	}
	var b []byte
	drawing := false
	for i, v := range vs {
		if math.IsNaN(v) {
			drawing = false
			continue
		}
		x := float64(i) * step
		y := h - math.Min(1, math.Max(0, v))*h
		lone := !drawing && (i+1 == len(vs) || math.IsNaN(vs[i+1]))
		if drawing {
			b = append(b, 'L')
		} else {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = append(b, 'M')
		}
		b = appendXY(b, x, y)
		if lone {
			b = append(b, 'h')
			b = strconv.AppendFloat(b, math.Min(2, w-x), 'f', 1, 64)
		}
		drawing = true
	}
	return string(b)
}

func appendXY(b []byte, x, y float64) []byte {
	b = strconv.AppendFloat(b, x, 'f', 1, 64)
	b = append(b, ',')
	return strconv.AppendFloat(b, y, 'f', 1, 64)
}
