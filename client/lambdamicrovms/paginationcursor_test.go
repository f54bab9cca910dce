package lambdamicrovms

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/emulator"
)

// Carried over from client/control. Catches the cursor sent unencoded: every
// cursor the emulator mints ends in '=' padding, which the service answers
// with a 400 and no message unless it is percent-encoded (finding
// pagination-cursor-encoding), so a walk of one-item pages must send %3D.
func TestCursorPaddingIsPercentEncoded(t *testing.T) {
	emu := emulator.New(emulator.Options{})
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	for _, n := range []string{"p1", "p2", "p3", "p4"} {
		emu.AddImage(n)
	}
	c := testClient(url)
	p := NewListMicrovmImagesPaginator(c, &ListMicrovmImagesInput{MaxResults: aws.Int32(1)})
	n := 0
	for p.HasMorePages() {
		page, err := p.NextPage(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	if n != 4 {
		t.Fatalf("walk: %d items, want 4", n)
	}
	sawPad := false
	for _, r := range emu.Requests() {
		if strings.Contains(r.RawQuery, "nextToken=") {
			sawPad = sawPad || strings.Contains(r.RawQuery, "%3D")
		}
	}
	if !sawPad {
		t.Fatal("no cursor with encoded padding was sent")
	}
}
