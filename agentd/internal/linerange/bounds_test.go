package linerange

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Catches: a digit check that refuses a valid bound (`raw[i] <= '0'` refuses
// "10", `raw[i] >= '9'` refuses "9", a negated check refuses every digit,
// `raw != ""` refuses every non-empty bound), a parse error returned on
// success (`err == nil`), and an end equal to the start refused
// (`*end <= r.Start`): a one-line window is the commonest request.
func TestParseAcceptsPlainDecimalBounds(t *testing.T) {
	for _, c := range []struct {
		start, end       string
		hasStart, hasEnd bool
		want             Range
	}{
		{"10", "90", true, true, Range{Start: 10, End: 90}},
		{"9", "19", true, true, Range{Start: 9, End: 19}},
		{"4", "4", true, true, Range{Start: 4, End: 4}},
		{"1234567890", "", true, false, Range{Start: 1234567890}},
		{"", "7", false, true, Range{Start: 1, End: 7}},
	} {
		r, present, err := Parse(c.start, c.end, c.hasStart, c.hasEnd)
		if err != nil || !present || r != c.want {
			t.Errorf("Parse(%q, %q, %v, %v) = %+v, %v, %v; want %+v", c.start, c.end, c.hasStart, c.hasEnd, r, present, err, c.want)
		}
	}
}

// Catches: a bound that is not plain decimal digits let through (a dropped
// emptiness check or digit loop) and a refusal that is not ErrNotInteger,
// which the handler maps to its own 400 body.
func TestParseRefusesAnythingButDigits(t *testing.T) {
	for _, raw := range []string{"", "+1", "-1", " 2", "2 ", "1_0", "0x10", "1e3", "١", "18446744073709551616"} {
		if _, present, err := Parse(raw, "", true, false); !present || !errors.Is(err, ErrNotInteger) {
			t.Errorf("start %q: present %v err %v, want ErrNotInteger", raw, present, err)
		}
		if _, _, err := Parse("1", raw, true, true); !errors.Is(err, ErrNotInteger) {
			t.Errorf("end %q: err %v, want ErrNotInteger", raw, err)
		}
	}
	if _, _, err := Parse("5", "4", true, true); err == nil || errors.Is(err, ErrNotInteger) {
		t.Errorf("end before start: %v, want a range error", err)
	}
	if _, _, err := Parse("0", "", true, false); err == nil || errors.Is(err, ErrNotInteger) {
		t.Errorf("start 0: %v, want a range error", err)
	}
}

// Catches: an open-ended window (End 0) that selects nothing
// (`w.r.End != 0 || w.line <= w.r.End` for `==`), and a newline at the very
// start of what is left of a chunk not ending its line (`nl > 0`), which
// merges an empty line into the next.
func TestWindowOpenEndedAndEmptyLines(t *testing.T) {
	const data = "a\n\n\nb\nc"
	for _, c := range []struct {
		r    Range
		want string
	}{
		{Range{Start: 2}, "\n\nb\nc"},
		{Range{Start: 2, End: 2}, "\n"},
		{Range{Start: 3, End: 4}, "\nb\n"},
		{Range{Start: 5}, "c"},
		{Range{Start: 6}, ""},
	} {
		for _, chunk := range []int{1, 2, len(data)} {
			var out bytes.Buffer
			n, err := Copy(&out, &sized{r: strings.NewReader(data), n: chunk}, c.r)
			if err != nil || out.String() != c.want || n != int64(len(c.want)) {
				t.Errorf("%+v in chunks of %d: %q (%d), %v; want %q", c.r, chunk, out.String(), n, err, c.want)
			}
		}
	}
}
