package agentd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// referenceDecode is an independent decoder with the semantics the reference
// daemon's (serde) and encoding/json/v2 share, built on encoding/json's
// token reader: the body is valid UTF-8, no object repeats a key, a key binds
// a field only when it equals the field's name exactly, and any other key is
// ignored. It is what FuzzStrictDecodeMatchesReference holds decodeStrict to.
func referenceDecode(data []byte, v *protocol.StartRequest) error {
	if !utf8.Valid(data) {
		return errors.New("invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	val, err := refValue(dec)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	if obj, ok := val.(map[string]any); ok {
		val = exactKeys(obj, reflect.TypeFor[protocol.StartRequest]())
	}
	filtered, err := json.Marshal(val)
	if err != nil {
		return err
	}
	return json.Unmarshal(filtered, v)
}

// refValue reads one JSON value, refusing an object that repeats a key.
func refValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key := k.(string)
			if _, dup := obj[key]; dup {
				return nil, errors.New("duplicate key")
			}
			if obj[key], err = refValue(dec); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token()
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			e, err := refValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, e)
		}
		_, err := dec.Token()
		return arr, err
	}
	return tok, nil
}

// exactKeys keeps the keys of obj that name a field of struct type t exactly,
// recursing into struct-typed fields; map fields keep every key.
func exactKeys(obj map[string]any, t reflect.Type) map[string]any {
	out := map[string]any{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		v, ok := obj[name]
		if !ok {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if sub, isObj := v.(map[string]any); isObj && ft.Kind() == reflect.Struct {
			v = exactKeys(sub, ft)
		}
		out[name] = v
	}
	return out
}

// FuzzStrictDecodeMatchesReference is the differential: agentd's start-body
// decoder and the reference decoder above accept the same bodies and decode
// them to the same request. Catches: going back to encoding/json (COMMAND
// binds command, a duplicate's last value wins), or a strict decoder that
// refuses an unknown key the reference ignores.
func FuzzStrictDecodeMatchesReference(f *testing.F) {
	for _, seed := range []string{
		`{"exec_id":"a","command":["true"]}`,
		`{"COMMAND":["touch","/tmp/x"],"Exec_ID":"x"}`,
		`{"exec_id":"a","exec_id":"b","command":["true"]}`,
		`{"exec_id":"a","command":["sh"],"env":{"A":"1","A":"2"}}`,
		`{"exec_id":"a","command":["sh"],"tty":{"rows":1,"cols":2,"Rows":3}}`,
		`{"exec_id":"a","command":["sh"],"timeout_sec":1e-3,"user":65534,"unknown":{"x":[1,2]}}`,
		`{"exec_id":"a","command":null,"cwd":"/","shell":true,"stdin":false}`,
		"{\"exec_id\":\"\xff\",\"command\":[]}",
		`{"exec_id":"a","command":["x"],"user":1.5}`,
		`[1,2]`, `null`, `{"exec_id":"a"} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want protocol.StartRequest
		errGot := decodeStrict(data, &got)
		errWant := referenceDecode(data, &want)
		if (errGot == nil) != (errWant == nil) {
			t.Fatalf("%q: agentd %v, reference %v", data, errGot, errWant)
		}
		if errGot == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: agentd decoded %+v, reference %+v", data, got, want)
		}
	})
}

// Request bodies are decoded case-sensitively and a duplicate key is
// refused, on a real agentd. Before: {"COMMAND": [...], "Exec_ID": "x"} ran
// the command, and a repeated exec_id took its last value. Catches: the
// start or stdin route decoding with encoding/json again.
func TestRoundTwoStrictJSONBodies(t *testing.T) {
	d := bootedDaemon(t, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	post := func(path, body string) (int, protocol.ErrorBody) {
		req, _ := http.NewRequest("POST", d.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.http.Do(req.WithContext(offContract(req.Context())))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e protocol.ErrorBody
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e
	}
	for name, body := range map[string]string{
		"case-folded keys":    `{"COMMAND":["touch","` + marker + `"],"Exec_ID":"folded"}`,
		"case-folded command": `{"exec_id":"folded2","Command":["touch","` + marker + `"]}`,
		"duplicate exec_id":   `{"exec_id":"dup-a","command":["touch","` + marker + `"],"exec_id":"dup-b"}`,
		"duplicate env key":   `{"exec_id":"dup-env","command":["touch","` + marker + `"],"env":{"A":"1","A":"2"}}`,
	} {
		status, e := post("/v1/exec/start", body)
		if status != http.StatusBadRequest || e.Error != taxonomy.SlugMalformedRequest {
			t.Errorf("%s: %d %+v, want 400 malformed_request", name, status, e)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a start with case-folded or duplicate keys ran its command")
	}
	for _, id := range []string{"folded", "folded2", "dup-a", "dup-b", "dup-env"} {
		if d.srv.execs.get(id) != nil {
			t.Errorf("exec %s was registered", id)
		}
	}
	d.mustStart(protocol.StartRequest{ExecID: "in", Command: []string{"cat"}, Stdin: true})
	if status, e := post("/v1/exec/in/stdin", `{"data":"a","data":"b"}`); status != http.StatusBadRequest || e.Error != taxonomy.SlugMalformedRequest {
		t.Errorf("stdin with a duplicate key: %d %+v", status, e)
	}
	// The exact spelling still works.
	if status, _ := post("/v1/exec/start", `{"exec_id":"exact","command":["true"]}`); status != http.StatusOK {
		t.Fatalf("a well-formed start: %d", status)
	}
}
