package render

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/muesli/termenv"
)

// Shared human rendering: every command that prints a table builds a grid
// and hands it here. On a terminal the grid is drawn as a frame with
// charmbracelet's lipgloss table (aligned columns, a bold header, alarm rows
// in red, a footer under the frame); into a pipe it is plain tab-aligned
// text with no escape codes, so grep and awk read it. NO_COLOR
// (https://no-color.org) keeps the frame and drops the colour.

// Grid is a table's rows, already rendered to strings.
type Grid struct {
	Headers []string
	Rows    [][]string
	// alarm marks rows drawn in red on a terminal: a leaked resource, a
	// failed check; on a pipe they are the same text.
	Alarm map[int]bool
	// footer is one line under the table: a total, a count.
	Footer string
}

// Add appends a row; alarm marks it.
func (g *Grid) Add(alarm bool, cells ...string) {
	if alarm {
		if g.Alarm == nil {
			g.Alarm = map[int]bool{}
		}
		g.Alarm[len(g.Rows)] = true
	}
	g.Rows = append(g.Rows, cells)
}

// renderer is lipgloss's renderer for w, without colour under NO_COLOR.
func (a *IO) renderer(w io.Writer) *lipgloss.Renderer {
	r := lipgloss.NewRenderer(w)
	if a.Env("NO_COLOR") != "" {
		r.SetColorProfile(termenv.Ascii)
	}
	return r
}

// WriteGrid draws g on w: a frame when stdout is a terminal, plain text
// otherwise.
func (a *IO) WriteGrid(w io.Writer, g Grid) error {
	if !a.StdoutTTY {
		return plainGrid(w, g)
	}
	r := a.renderer(w)
	header := r.NewStyle().Bold(true).Padding(0, 1)
	cell := r.NewStyle().Padding(0, 1)
	alarm := cell.Foreground(lipgloss.Color("1")).Bold(true)
	t := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(r.NewStyle().Faint(true)).
		Headers(g.Headers...).
		Rows(g.Rows...).
		StyleFunc(func(row, _ int) lipgloss.Style {
			switch {
			case row == table.HeaderRow:
				return header
			case g.Alarm[row]:
				return alarm
			}
			return cell
		})
	if _, err := fmt.Fprintln(w, t.Render()); err != nil {
		return err
	}
	if g.Footer != "" {
		_, err := fmt.Fprintln(w, r.NewStyle().Bold(true).Render(g.Footer))
		return err
	}
	return nil
}

// plainGrid is the pipe form: a header line, tab-aligned rows, the footer.
func plainGrid(w io.Writer, g Grid) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	upper := make([]string, len(g.Headers))
	for i, h := range g.Headers {
		upper[i] = strings.ToUpper(h)
	}
	fmt.Fprintln(tw, strings.Join(upper, "\t"))
	for _, row := range g.Rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if g.Footer != "" {
		_, err := fmt.Fprintln(w, g.Footer)
		return err
	}
	return nil
}
