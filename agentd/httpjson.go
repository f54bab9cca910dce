package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error: response encoding failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError answers with the exec routes' JSON ErrorBody, with the one
// status api/openapi.yaml declares for slug (make gen refuses a slug with
// two), so a bad key stays 400 and an absent id 404 without each call site
// restating it.
func writeError(w http.ResponseWriter, slug, detail string) {
	status, ok := taxonomy.SlugStatus(slug)
	if !ok {
		// Only a slug missing from the contract gets here: a daemon bug.
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, protocol.ErrorBody{Error: slug, Detail: detail})
}

// readJSON decodes a capped request body, mapping an over-cap body to 413:
// with tooLargeSlug, a JSON ErrorBody; without, the spec's text/plain
// BodyTooLarge, whose text is tooLargeText (or max_body_bytes' when empty).
func readJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, tooLargeSlug, tooLargeText string) bool {
	// A cap of 0 admits no body at all, chunked or not: the same refusal a
	// declared Content-Length over it gets before anything is read.
	body := http.MaxBytesReader(w, r.Body, max(limit, 0))
	data, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			if tooLargeSlug == "" {
				if tooLargeText == "" || tooLarge.Limit != limit {
					tooLargeText = bodyTooLargeText(tooLarge.Limit)
				}
				http.Error(w, strings.TrimSuffix(tooLargeText, "\n"), http.StatusRequestEntityTooLarge)
			} else {
				writeError(w, tooLargeSlug, fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit))
			}
			return false
		}
		writeError(w, taxonomy.SlugMalformedRequest, "the request body could not be read")
		return false
	}
	if err := decodeStrict(data, v); err != nil {
		writeError(w, taxonomy.SlugMalformedRequest, "the body is not a valid request: "+jsonFault(err))
		return false
	}
	return true
}

// decodeStrict decodes a request body with encoding/json/v2 semantics
// (github.com/go-json-experiment/json, the mirror of the standard library's
// experiment): keys match field names exactly, a duplicate key is refused, and
// so is invalid UTF-8, as the reference daemon's decoder does. encoding/json
// matched keys case-insensitively and let the last duplicate win, so
// {"COMMAND": [...], "Exec_ID": "x"} ran a command every other client reads
// as a body without one. An unknown key is still ignored, so a newer client's
// extra field is not a refusal.
func decodeStrict(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v)
}

// jsonFault describes a decode error by position and type, not by quoting input.
func jsonFault(err error) string {
	if errors.Is(err, jsontext.ErrDuplicateName) {
		return "a key appears twice in one object; keys must be unique"
	}
	var semErr *jsonv2.SemanticError
	if errors.As(err, &semErr) {
		if semErr.GoType != nil {
			return fmt.Sprintf("field %s must be %s", shortPointer(string(semErr.JSONPointer)), semErr.GoType)
		}
		return "field " + shortPointer(string(semErr.JSONPointer)) + " is not valid"
	}
	var synErr *jsontext.SyntacticError
	if errors.As(err, &synErr) {
		return fmt.Sprintf("invalid JSON at byte %d", synErr.ByteOffset)
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %q must be %s, not a JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Sprintf("invalid JSON at byte %d", syntaxErr.Offset)
	}
	return "invalid JSON"
}

// shortPointer quotes a JSON pointer into the body, cut short: it may hold a
// caller's map key.
func shortPointer(p string) string {
	if len(p) > 64 {
		p = p[:64] + "..."
	}
	return strconv.Quote(p)
}

func startBodyTooLargeText(limit int64) string {
	return "exec start body is larger than " + strconv.FormatInt(limit, 10) + " bytes; argv and env must fit in it\n"
}
