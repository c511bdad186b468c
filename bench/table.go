package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Table is a markdown table printed once all its rows are in.
type Table struct {
	Title string
	Cols  []string
	rows  [][]string
}

// Row appends a row; values are formatted with %v, floats with 3 significant digits.
func (t *Table) Row(vals ...any) {
	r := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case float64:
			r[i] = fmtFloat(x)
		default:
			r[i] = fmt.Sprint(v)
		}
	}
	t.rows = append(t.rows, r)
}

// Print writes the table as markdown.
func (t *Table) Print(w io.Writer) {
	if t.Title != "" {
		fmt.Fprintf(w, "%s\n\n", t.Title)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.Cols, " | "))
	seps := make([]string, len(t.Cols))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

func fmtFloat(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1fk", x/1e3)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Ratio formats a/b as "1.23×" ("-" when b is 0).
func Ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
