package emulator

import (
	"net/http"
	"strings"
)

// errPreconditionFailed is S3's answer to a conditional write whose
// condition does not hold.
var errPreconditionFailed = s3Fail{http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"}

// putPrecondition checks a PutObject's conditional headers against the
// object now at its key (nil for none), as S3 does: If-None-Match "*"
// writes only where no object is, If-Match only over the object of that
// ETag (no object at all is NoSuchKey). It is what lets a client take a
// lease with one request that two writers cannot both win; nil means the
// write may go ahead.
func putPrecondition(r *http.Request, cur *s3Object) *s3Fail {
	if v := r.Header.Get("If-None-Match"); v != "" {
		if strings.TrimSpace(v) != "*" {
			return &errNotImplemented
		}
		if cur != nil {
			return &errPreconditionFailed
		}
	}
	if v := r.Header.Get("If-Match"); v != "" {
		if cur == nil {
			return &errNoSuchKey
		}
		if strings.Trim(strings.TrimSpace(v), `"`) != strings.Trim(cur.etag, `"`) {
			return &errPreconditionFailed
		}
	}
	return nil
}
