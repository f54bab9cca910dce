package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Edges of building and describing a Session that the mutation run left
// untested (docs/mutation.md, client). None of them sends a request.

// https is as good as http, any other scheme is refused, and so is a zero
// idle timeout (every stream would end at once). Catches the https test
// negated in newSession (https refused, another scheme let through) and
// WithIdleTimeout's `d <= 0` made `d < 0`.
func TestSessionConstructionEdges(t *testing.T) {
	m := &countingMinter{}
	if _, err := Proxied("https://vm.example.invalid", "tok", m); err != nil {
		t.Fatalf("an https endpoint: %v", err)
	}
	if _, err := Proxied("ftp://vm.example.invalid", "tok", m); KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("an ftp endpoint: %v", err)
	}
	if _, err := Proxied("https://vm.example.invalid", "tok", m, WithIdleTimeout(0)); KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("a zero idle timeout: %v", err)
	}
}

// String and LogValue say whether the session is proxied, and through
// which port, and never carry the agent token. Catches either `proxy != nil`
// test negated (a direct session described as proxied, or the reverse).
func TestSessionDescribesItsMode(t *testing.T) {
	const secret = "secret-agent-token"
	direct, err := Direct("http://127.0.0.1:1", secret)
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := Proxied("https://vm.example.invalid", secret, &countingMinter{}, WithAgentPort(9000))
	if err != nil {
		t.Fatal(err)
	}
	if s := direct.String(); !strings.Contains(s, " direct ") || strings.Contains(s, "proxied") || strings.Contains(s, secret) {
		t.Fatalf("direct: %s", s)
	}
	if s := proxied.String(); !strings.Contains(s, "proxied port 9000") || strings.Contains(s, secret) {
		t.Fatalf("proxied: %s", s)
	}
	port := func(v slog.Value) (int64, bool) {
		for _, a := range v.Group() {
			if a.Key == "proxy_port" {
				return a.Value.Int64(), true
			}
			if strings.Contains(a.Value.String(), secret) {
				t.Fatalf("log value carries the token: %v", v)
			}
		}
		return 0, false
	}
	if p, ok := port(direct.LogValue()); ok {
		t.Fatalf("a direct session logged proxy_port %d", p)
	}
	if p, ok := port(proxied.LogValue()); !ok || p != 9000 {
		t.Fatalf("a proxied session logged proxy_port %d (%v)", p, ok)
	}
}

// ConnectHeaders takes ports 1 and 65535 and refuses 0 and 65536 before
// minting. Catches either bound made strict the wrong way (`port < 1` as
// `<= 1`, `port > 65535` as `>=`).
func TestConnectHeadersPortBoundsAreInclusive(t *testing.T) {
	m := &countingMinter{}
	s, err := Proxied("https://vm.example.invalid", "tok", m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []int{1, 65535} {
		h, err := s.ConnectHeaders(ctx, p)
		if err != nil || h.Get(taxonomy.ProxyAuthHeader) == "" {
			t.Fatalf("port %d: %v %v", p, h, err)
		}
	}
	before := m.count()
	for _, p := range []int{0, 65536} {
		if _, err := s.ConnectHeaders(ctx, p); KindOf(err) != taxonomy.KindInvalidArg {
			t.Fatalf("port %d: %v", p, err)
		}
	}
	if m.count() != before {
		t.Fatal("a refused port was minted for")
	}
}

// Only a 2xx is success: a 300 whose body is a well-formed health answer
// is still an error. Catches `StatusCode < 300` made `<= 300` in send.
func TestStatus300IsNotSuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMultipleChoices)
		json.NewEncoder(w).Encode(protocol.Health{Version: "test", Bootstrapped: true})
	}))
	defer srv.Close()
	s := direct(t, srv.URL, "tok")
	if h, err := s.Health(context.Background()); err == nil {
		t.Fatalf("a 300 read as health %+v", h)
	}
}

// A refusal's message carries the daemon's slug and detail, and a body
// that is not an error object is quoted as the detail with no slug.
// Catches either test in statusError negated (`slug != ""`: the slug
// dropped, or an empty one printed; `detail != ""`: the detail dropped).
func TestRefusalMessageNamesSlugAndDetail(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusConflict, `{"error":"already_acked","detail":"exec e1 was acked"}`, "HTTP 409 already_acked: exec e1 was acked"},
		{http.StatusBadGateway, "upstream went away", "HTTP 502: upstream went away"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		}))
		s := direct(t, srv.URL, "tok", WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
		_, err := s.Health(context.Background())
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("HTTP %d %s: %v, want it to say %q", c.status, c.body, err, c.want)
		}
	}
}

// A body that ends inside a line is cut, whatever line it is: here the
// first line of the next frame. Catches readLine's `err == io.EOF` negated
// (the partial line read as a clean end, so a cut stream looks finished).
func TestSSEPartialLineAtTheEndIsACut(t *testing.T) {
	body := outputFrame(0, protocol.StreamStdout, []byte("hi")) + "event: exi"
	evs, err := parseAll(newSSEParser(strings.NewReader(body)))
	if len(evs) != 1 || err != io.ErrUnexpectedEOF {
		t.Fatalf("%d events then %v, want 1 then io.ErrUnexpectedEOF", len(evs), err)
	}
}

// A frame whose lines all arrived but whose blank line did not is cut too.
// Catches nextFrame's `err == io.EOF` negated (the half frame read as a
// clean end).
func TestSSEFrameWithoutItsBlankLineIsACut(t *testing.T) {
	body := outputFrame(0, protocol.StreamStdout, []byte("hi")) + strings.TrimSuffix(exitFrame(0, 2), "\n")
	evs, err := parseAll(newSSEParser(strings.NewReader(body)))
	if len(evs) != 1 || err != io.ErrUnexpectedEOF {
		t.Fatalf("%d events then %v, want 1 then io.ErrUnexpectedEOF", len(evs), err)
	}
}

// A field with nothing after its colon is a field with an empty value (the
// SSE grammar allows it; an "id:" line resets the id). Catches the
// leading-space test made `len(value) >= 0`, which indexes an empty value.
func TestSSEEmptyFieldValue(t *testing.T) {
	frame := outputFrame(0, protocol.StreamStdout, []byte("hi"))
	body := strings.Replace(frame, "data:", "id:\ndata:", 1)
	evs, err := parseAll(newSSEParser(strings.NewReader(body)))
	if len(evs) != 1 || string(evs[0].Data) != "hi" || err != io.EOF {
		t.Fatalf("%+v then %v", evs, err)
	}
}

// Only a gap that ends before it starts is malformed; an empty one
// ([n, n), nothing lost) is read as it is. Catches the check made
// `To <= From`.
func TestSSEEmptyGapIsNotMalformed(t *testing.T) {
	evs, err := parseAll(newSSEParser(strings.NewReader(gapFrame(5, 5) + gapFrame(7, 6))))
	if len(evs) != 1 || evs[0].Kind != EventGap || evs[0].Gap.From != 5 || evs[0].Gap.To != 5 || !errors.Is(err, errMalformed) {
		t.Fatalf("%+v then %v; want the empty gap, then the backwards one refused", evs, err)
	}
}

// scanOutput, the fast path for output payloads, on bytes that end early
// and on the largest offset. Each short input is declined (the slow path
// then judges it), never read past its end; the largest uint64 offset is
// taken, and one more is declined. Catches the end-of-input tests made
// `i > len(b)` (at the start, after '{', after a key, before the stream's
// or the output's string) or `i <= len(b)` in the digit loop, each of which reads b[len(b)], and the overflow guard
// made `>=` or computed as `1<<64-1+d` (the fast path gives up on offsets
// it can hold).
func TestScanOutputEdges(t *testing.T) {
	for _, in := range []string{"", "{", `{"offset"`, `{"offset":12`, `{"offset":1,"stream":`, `{"offset":1,"output":`} {
		if _, _, _, ok := scanOutput([]byte(in)); ok {
			t.Errorf("%q taken", in)
		}
	}
	off, stream, b64, ok := scanOutput([]byte(`{"offset":18446744073709551615,"stream":"stdout","output":"aGk="}`))
	if !ok || off != 1<<64-1 || stream != protocol.StreamStdout || string(b64) != "aGk=" {
		t.Fatalf("the largest offset: %d %q %q %v", off, stream, b64, ok)
	}
	if _, _, _, ok := scanOutput([]byte(`{"offset":18446744073709551616,"stream":"stdout","output":"aGk="}`)); ok {
		t.Fatal("an offset past uint64 taken")
	}
	// Whitespace around the tokens, leading whitespace included, is skipped.
	// Catches skipWS's `i++` made `i--` (it walks back off the slice's start).
	if off, _, b64, ok := scanOutput([]byte(" { \"offset\" : 7 ,\t\"stream\":\"stderr\",\"output\":\"aGk=\" } ")); !ok || off != 7 || string(b64) != "aGk=" {
		t.Fatalf("spaced payload: %d %q %v", off, b64, ok)
	}
}

// Close ends a stream with io.EOF unless it already failed, in which case
// its failure stays. Catches Close's `st.err == nil` negated: a stream
// closed before any read would then answer Next with no event and no error
// forever, and a failed one would read as cleanly ended.
func TestStreamCloseKeepsAFailure(t *testing.T) {
	s := direct(t, "http://127.0.0.1:1", "tok")
	st := s.Exec("e1").Stream(context.Background(), 0)
	st.Close()
	if _, err := st.Next(); err != io.EOF {
		t.Fatalf("Next after Close: %v, want io.EOF", err)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"exec_not_found","detail":"no exec e1"}`)
	}))
	defer srv.Close()
	st = direct(t, srv.URL, "tok").Exec("e1").Stream(context.Background(), 0)
	_, ferr := st.Next()
	if ferr == nil || ferr == io.EOF {
		t.Fatalf("a stream of an unknown exec: %v", ferr)
	}
	st.Close()
	if _, err := st.Next(); err != ferr {
		t.Fatalf("Next after closing a failed stream: %v, want its failure %v", err, ferr)
	}
}
