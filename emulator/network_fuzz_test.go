package emulator

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzNetworkRoutes sends the emulator's network routes arbitrary paths,
// methods and bodies (a caller's bytes): no panic, no body read past its
// bound, and no answer ever quotes a body (it may carry a secret's value).
func FuzzNetworkRoutes(f *testing.F) {
	f.Add("PUT", "/_microvms/v1/launch-networks/0123456789abcdef", `{"policy":{"allow":[{"host":"a.test"}]},"secrets":[{"name":"K","value":"zz-secret-zz","hosts":["a.test"]}]}`)
	f.Add("PUT", "/_microvms/v1/microvms/microvm-1/network", `{"allow":[{"cidr":"10.0.0.0/8","ports":[1,2]}]}`)
	f.Add("GET", "/_microvms/v1/microvms//network", "")
	f.Add("PUT", "/_microvms/v1/launch-networks/x", `{"policy":{"allow":[{"host":"zz-secret-zz"}]},"secrets":[]}`)
	s := New(Options{})
	h := s.Handler()
	f.Fuzz(func(t *testing.T, method, path, body string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t?#%") || len(body) > 1<<16 {
			return
		}
		switch method {
		case "GET", "PUT", "POST", "DELETE":
		default:
			return
		}
		if _, err := url.ParseRequestURI(path); err != nil {
			return
		}
		req := httptest.NewRequest(method, "http://127.0.0.1"+path, bytes.NewReader([]byte(body)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if strings.HasPrefix(path, networkRoutePrefix) && strings.Contains(w.Body.String(), "zz-secret-zz") {
			t.Fatalf("%s %s answered with the body's secret: %s", method, path, w.Body.String())
		}
		if w.Code == http.StatusNoContent && !strings.HasPrefix(path, "/_microvms/v1/launch-networks/") {
			t.Fatalf("%s %s: 204", method, path)
		}
	})
}
