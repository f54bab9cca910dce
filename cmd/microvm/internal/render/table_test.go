package render

import (
	"bytes"
	"testing"
)

// In a pipe a grid is a header, the rows, then the footer on its own line;
// an empty footer adds nothing. Catches, in plainGrid, the Flush check
// `err != nil` made `==` (returns before the footer after a clean flush)
// and `g.footer != ""` made `==` (footer dropped, a blank line instead).
func TestPlainGridEndsWithItsFooter(t *testing.T) {
	for _, footer := range []string{"2 vms", ""} {
		var b bytes.Buffer
		g := Grid{Headers: []string{"id", "state"}, Footer: footer}
		g.Add(false, "a", "running")
		g.Add(true, "bb", "leaked")
		if err := plainGrid(&b, g); err != nil {
			t.Fatal(err)
		}
		want := "ID  STATE\na   running\nbb  leaked\n"
		if footer != "" {
			want += footer + "\n"
		}
		if b.String() != want {
			t.Errorf("footer %q: got %q, want %q", footer, b.String(), want)
		}
	}
}
