package emulator

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// s3Store is the S3 slice's state.
type s3Store struct {
	buckets map[string]*s3Bucket // by name
	uploads map[string]*s3Upload // open multipart uploads, by upload id
}

// The emulator's slice of S3: the buckets and objects the build path uses
// (client/build.S3Uploader through aws-sdk-go-v2's transfer manager, which
// sends a PutObject or, past its threshold, a multipart upload) and the
// reads that let a build take its artifact from s3://, served in S3's own
// restXml protocol on the same listener for requests signed for "s3". The
// operations are CreateBucket, HeadBucket, DeleteBucket, PutObject,
// GetObject, HeadObject, DeleteObject, CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload and AbortMultipartUpload; anything else is refused
// with S3's own 501 NotImplemented. The XML element names are the members
// of the S3 model's shapes (the aws-sdk-go-v2 s3 package's types), and the
// tests read every answer through that package's own client.

// maxObjectBytes bounds one object or part the emulator keeps in memory.
const maxObjectBytes = 512 << 20

// minPartBytes is S3's floor for every part but the last.
const minPartBytes = 5 << 20

type s3Object struct {
	// body is the object's bytes in the pieces they arrived in (a
	// completed multipart upload keeps its parts as they are rather than
	// copying them into one slice). A body is never changed once stored,
	// so a copy shares it.
	body     [][]byte
	etag     string
	modified time.Time
	ctype    string
	checksum map[string]string // x-amz-checksum-* header -> value, as sent
}

type s3Upload struct {
	bucket, key string
	ctype       string
	parts       map[int32]*s3Object
}

type s3Bucket struct {
	created time.Time
	objects map[string]*s3Object
	config  s3BucketConfig // s3_config.go
}

// The restXml bodies, named and shaped as the S3 model's members.
type (
	s3Error struct {
		XMLName    xml.Name `xml:"Error"`
		Code       string   `xml:"Code"`
		Message    string   `xml:"Message"`
		BucketName string   `xml:"BucketName,omitempty"`
		Key        string   `xml:"Key,omitempty"`
		UploadID   string   `xml:"UploadId,omitempty"`
		Resource   string   `xml:"Resource,omitempty"`
		RequestID  string   `xml:"RequestId"`
	}
	copyObjectResult struct {
		XMLName      xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CopyObjectResult"`
		ETag         string   `xml:"ETag"`
		LastModified string   `xml:"LastModified"`
		// The copy's CRC32 when its source was stored with one.
		ChecksumCRC32 string `xml:"ChecksumCRC32,omitempty"`
	}
	copyPartResult struct {
		XMLName      xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CopyPartResult"`
		ETag         string   `xml:"ETag"`
		LastModified string   `xml:"LastModified"`
	}
	initiateMultipartUploadResult struct {
		XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
		Bucket   string   `xml:"Bucket"`
		Key      string   `xml:"Key"`
		UploadID string   `xml:"UploadId"`
	}
	completedPart struct {
		PartNumber     int32  `xml:"PartNumber"`
		ETag           string `xml:"ETag"`
		ChecksumCRC32  string `xml:"ChecksumCRC32,omitempty"`
		ChecksumCRC32C string `xml:"ChecksumCRC32C,omitempty"`
	}
	completeMultipartUpload struct {
		XMLName xml.Name        `xml:"CompleteMultipartUpload"`
		Parts   []completedPart `xml:"Part"`
	}
	completeMultipartUploadResult struct {
		XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
		Location string   `xml:"Location"`
		Bucket   string   `xml:"Bucket"`
		Key      string   `xml:"Key"`
		ETag     string   `xml:"ETag"`
	}
)

// s3Fail is one S3 error: its status, code and message.
type s3Fail struct {
	status  int
	code    string
	message string
}

var (
	errNoSuchBucket   = s3Fail{http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist"}
	errNoSuchKey      = s3Fail{http.StatusNotFound, "NoSuchKey", "The specified key does not exist."}
	errNoSuchUpload   = s3Fail{http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."}
	errNotImplemented = s3Fail{http.StatusNotImplemented, "NotImplemented", "A header you provided implies functionality that is not implemented"}
)

func (s *Server) writeS3Error(w http.ResponseWriter, r *http.Request, f s3Fail, bucket, key string) {
	id := fmt.Sprintf("%016X", s.reqIDs.Add(1))
	w.Header().Set("x-amz-request-id", id)
	if r.Method == http.MethodHead {
		// A HEAD answer has no body; the SDK reads the status alone.
		w.WriteHeader(f.status)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(f.status)
	e := s3Error{Code: f.code, Message: f.message, RequestID: id, Key: key, Resource: r.URL.Path}
	if f.code == "NoSuchBucket" {
		e.BucketName = bucket
	}
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(e)
}

func writeS3XML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(v)
}

// s3Address splits a request into bucket and key, path-style
// (/bucket/key) or virtual-hosted (bucket.localhost/key).
func s3Address(r *http.Request) (bucket, key string) {
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	if b, ok := strings.CutSuffix(host, ".localhost"); ok && b != "" {
		return b, strings.TrimPrefix(r.URL.Path, "/")
	}
	bucket, key, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return bucket, key
}

// CreateBucket makes an empty bucket directly, as `microvm emulator` does
// for $MICROVM_BUCKET; an existing one is kept.
func (s *Server) CreateBucket(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bucketLocked(name)
}

func (s *Server) bucketLocked(name string) *s3Bucket {
	if s.s3.buckets == nil {
		s.s3.buckets = map[string]*s3Bucket{}
	}
	b := s.s3.buckets[name]
	if b == nil {
		b = &s3Bucket{created: s.opt.Now(), objects: map[string]*s3Object{}}
		s.s3.buckets[name] = b
	}
	return b
}

// Object returns a copy of an object's bytes, false when there is none.
func (s *Server) Object(bucket, key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.s3.buckets[bucket]
	if b == nil || b.objects[key] == nil {
		return nil, false
	}
	return b.objects[key].bytes(), true
}

// size is the object's length in bytes.
func (o *s3Object) size() int {
	n := 0
	for _, p := range o.body {
		n += len(p)
	}
	return n
}

// bytes is a new slice holding the whole object.
func (o *s3Object) bytes() []byte {
	out := make([]byte, 0, o.size())
	for _, p := range o.body {
		out = append(out, p...)
	}
	return out
}

// span is bytes lo to hi (inclusive) of the object, as the pieces of its
// body that hold them (shared, not copied).
func (o *s3Object) span(lo, hi int64) [][]byte {
	var out [][]byte
	off := int64(0)
	for _, p := range o.body {
		end := off + int64(len(p))
		if end > lo && off <= hi {
			out = append(out, p[max(lo-off, 0):min(hi+1, end)-off])
		}
		off = end
	}
	return out
}

// serveS3 answers one request signed for s3.
func (s *Server) serveS3(w http.ResponseWriter, r *http.Request) {
	bucket, key := s3Address(r)
	q := r.URL.Query()
	q.Del("x-id") // aws-sdk-go-v2 names the operation in the query
	op := s3Operation(r.Method, key, q)
	if op == "PutObject" && r.Header.Get("x-amz-copy-source") != "" {
		op = "CopyObject"
	}
	if op == "" {
		s.writeS3Error(w, r, errNotImplemented, bucket, key)
		return
	}
	if s.fault(w, op) {
		return
	}
	var body []byte
	var etag string
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		var f *s3Fail
		// Hashed as it is read, before the lock: parts arrive
		// concurrently, and one part's MD5 must not hold up every other
		// request.
		body, etag, f = readS3Body(r)
		if f != nil {
			s.writeS3Error(w, r, *f, bucket, key)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.s3.buckets[bucket]
	if op == "CreateBucket" {
		if b != nil {
			s.writeS3Error(w, r, s3Fail{http.StatusConflict, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it."}, bucket, "")
			return
		}
		s.bucketLocked(bucket)
		w.Header().Set("Location", "/"+bucket)
		w.WriteHeader(http.StatusOK)
		return
	}
	if b == nil {
		s.writeS3Error(w, r, errNoSuchBucket, bucket, key)
		return
	}
	fail := func(f s3Fail) { s.writeS3Error(w, r, f, bucket, key) }
	switch op {
	case "HeadBucket":
		w.Header().Set("x-amz-bucket-region", s.opt.Region)
		w.WriteHeader(http.StatusOK)
	case "DeleteBucket":
		if len(b.objects) > 0 {
			fail(s3Fail{http.StatusConflict, "BucketNotEmpty", "The bucket you tried to delete is not empty"})
			return
		}
		delete(s.s3.buckets, bucket)
		w.WriteHeader(http.StatusNoContent)
	case "PutObject":
		if f := putPrecondition(r, b.objects[key]); f != nil {
			fail(*f)
			return
		}
		obj := &s3Object{body: [][]byte{body}, etag: etag, modified: s.opt.Now(), ctype: r.Header.Get("Content-Type"), checksum: checksumHeaders(r)}
		b.objects[key] = obj
		obj.writeHeaders(w)
		w.WriteHeader(http.StatusOK)
	case "CopyObject":
		// A server-side copy of a whole object, as S3 does it: the source
		// is bucket/key (URL-encoded, a leading slash allowed), its body,
		// type and checksums carried over (the default COPY directive).
		// Bodies are never changed in place, so the copy shares the bytes.
		from, f := s.copySourceLocked(r)
		if f != nil {
			fail(*f)
			return
		}
		if f := putPrecondition(r, b.objects[key]); f != nil {
			fail(*f)
			return
		}
		obj := &s3Object{body: from.body, etag: from.etag, modified: s.opt.Now(), ctype: from.ctype, checksum: from.checksum}
		b.objects[key] = obj
		writeS3XML(w, copyObjectResult{ETag: obj.etag, LastModified: obj.modified.UTC().Format("2006-01-02T15:04:05.000Z"), ChecksumCRC32: obj.checksum["x-amz-checksum-crc32"]})
	case "GetObject", "HeadObject":
		obj := b.objects[key]
		if obj == nil {
			fail(errNoSuchKey)
			return
		}
		obj.writeHeaders(w)
		w.Header().Set("Content-Length", strconv.Itoa(obj.size()))
		w.Header().Set("Last-Modified", obj.modified.UTC().Format(http.TimeFormat))
		ct := obj.ctype
		if ct == "" {
			ct = "binary/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		if op == "GetObject" {
			for _, p := range obj.body {
				if _, err := w.Write(p); err != nil {
					break
				}
			}
		}
	case "DeleteObject":
		delete(b.objects, key)
		w.WriteHeader(http.StatusNoContent)
	case "CreateMultipartUpload":
		if s.s3.uploads == nil {
			s.s3.uploads = map[string]*s3Upload{}
		}
		id := base64.RawURLEncoding.EncodeToString([]byte(s.nextID("upload-")))
		s.s3.uploads[id] = &s3Upload{bucket: bucket, key: key, ctype: r.Header.Get("Content-Type"), parts: map[int32]*s3Object{}}
		if alg := r.Header.Get("x-amz-checksum-algorithm"); alg != "" {
			w.Header().Set("x-amz-checksum-algorithm", alg)
		}
		writeS3XML(w, initiateMultipartUploadResult{Bucket: bucket, Key: key, UploadID: id})
	case "UploadPart":
		up := s.s3.uploads[q.Get("uploadId")]
		if up == nil || up.bucket != bucket || up.key != key {
			fail(errNoSuchUpload)
			return
		}
		n, err := strconv.Atoi(q.Get("partNumber"))
		if err != nil || n < 1 || n > 10000 {
			fail(s3Fail{http.StatusBadRequest, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive"})
			return
		}
		if r.Header.Get("x-amz-copy-source") != "" {
			// UploadPartCopy: the part is a byte range of an object here.
			from, f := s.copySourceLocked(r)
			if f != nil {
				fail(*f)
				return
			}
			lo, hi, ok := copyRange(r.Header.Get("x-amz-copy-source-range"), int64(from.size()))
			if !ok {
				fail(s3Fail{http.StatusBadRequest, "InvalidArgument", "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy"})
				return
			}
			span := from.span(lo, hi)
			sum := md5.New()
			for _, p := range span {
				sum.Write(p)
			}
			part := &s3Object{body: span, etag: `"` + hex.EncodeToString(sum.Sum(nil)) + `"`, checksum: map[string]string{}}
			up.parts[int32(n)] = part
			writeS3XML(w, copyPartResult{ETag: part.etag, LastModified: s.opt.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
			return
		}
		part := &s3Object{body: [][]byte{body}, etag: etag, checksum: checksumHeaders(r)}
		up.parts[int32(n)] = part
		part.writeHeaders(w)
		w.WriteHeader(http.StatusOK)
	case "CompleteMultipartUpload":
		id := q.Get("uploadId")
		up := s.s3.uploads[id]
		if up == nil || up.bucket != bucket || up.key != key {
			fail(errNoSuchUpload)
			return
		}
		var req completeMultipartUpload
		if err := xml.Unmarshal(body, &req); err != nil || len(req.Parts) == 0 {
			fail(s3Fail{http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema"})
			return
		}
		sums := md5.New()
		for i, p := range req.Parts {
			part := up.parts[p.PartNumber]
			if i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber {
				fail(s3Fail{http.StatusBadRequest, "InvalidPartOrder", "The list of parts was not in ascending order. Parts must be ordered by part number."})
				return
			}
			if part == nil || strings.Trim(p.ETag, `"`) != strings.Trim(part.etag, `"`) {
				fail(s3Fail{http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found.  The part may not have been uploaded, or the specified entity tag may not match the part's entity tag."})
				return
			}
			if i < len(req.Parts)-1 && part.size() < minPartBytes {
				fail(s3Fail{http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size."})
				return
			}
			raw, _ := hex.DecodeString(strings.Trim(part.etag, `"`))
			sums.Write(raw)
		}
		// The parts are the object's pieces as they are: joining them
		// would copy the whole object once more in memory.
		var whole [][]byte
		for _, p := range req.Parts {
			whole = append(whole, up.parts[p.PartNumber].body...)
		}
		etag := fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(sums.Sum(nil)), len(req.Parts))
		b.objects[key] = &s3Object{body: whole, etag: etag, modified: s.opt.Now(), ctype: up.ctype}
		delete(s.s3.uploads, id)
		writeS3XML(w, completeMultipartUploadResult{Location: "/" + bucket + "/" + url.PathEscape(key), Bucket: bucket, Key: key, ETag: etag})
	case "AbortMultipartUpload":
		if s.s3.uploads[q.Get("uploadId")] == nil {
			fail(errNoSuchUpload)
			return
		}
		delete(s.s3.uploads, q.Get("uploadId"))
		w.WriteHeader(http.StatusNoContent)
	default:
		s.serveS3BucketConfig(w, r, op, bucket, b, body, q)
	}
}

// s3Operation names the S3 operation a request is, "" for one outside the
// slice (a subresource such as ?acl or ?tagging, a listing, a copy).
func s3Operation(method, key string, q url.Values) string {
	has := func(k string) bool { _, ok := q[k]; return ok }
	only := func(keys ...string) bool {
		for k := range q {
			if !slices.Contains(keys, k) {
				return false
			}
		}
		return true
	}
	if key == "" {
		if op := s3BucketConfigOperation(method, q); op != "" {
			return op
		}
		if !only() {
			return ""
		}
		return map[string]string{http.MethodPut: "CreateBucket", http.MethodHead: "HeadBucket", http.MethodDelete: "DeleteBucket"}[method]
	}
	switch {
	case method == http.MethodPost && has("uploads") && only("uploads"):
		return "CreateMultipartUpload"
	case method == http.MethodPut && has("uploadId") && has("partNumber") && only("uploadId", "partNumber"):
		return "UploadPart"
	case method == http.MethodPost && has("uploadId") && only("uploadId"):
		return "CompleteMultipartUpload"
	case method == http.MethodDelete && has("uploadId") && only("uploadId"):
		return "AbortMultipartUpload"
	case !only():
		return ""
	}
	return map[string]string{http.MethodPut: "PutObject", http.MethodGet: "GetObject", http.MethodHead: "HeadObject", http.MethodDelete: "DeleteObject"}[method]
}

func (o *s3Object) writeHeaders(w http.ResponseWriter) {
	w.Header().Set("ETag", o.etag)
	for k, v := range o.checksum {
		w.Header().Set(k, v)
	}
}

// checksumHeaders are the x-amz-checksum-* values a request carried (in its
// headers or, aws-chunked, its trailer, which readS3Body moved there).
func checksumHeaders(r *http.Request) map[string]string {
	out := map[string]string{}
	for k, v := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-amz-checksum-") && lk != "x-amz-checksum-algorithm" && len(v) > 0 {
			out[lk] = v[0]
		}
	}
	return out
}

// readS3Body reads an object or part: plain, or aws-chunked as the SDK
// sends a streamed body with a trailing checksum. A checksum the request
// names (CRC32, CRC32C) is verified, as S3 verifies it.
func readS3Body(r *http.Request) ([]byte, string, *s3Fail) {
	tooBig := &s3Fail{http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size"}
	sums := map[string]hash.Hash32{}
	for name, h := range s3Checksums {
		if r.Header.Get(name) != "" {
			sums[name] = h()
		}
	}
	chunked := strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") || strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-")
	md := md5.New()
	// A plain body is hashed (MD5 for its ETag, and the checksums its
	// headers name) while each piece is fresh from the socket, in the one
	// pass that reads it; an aws-chunked one after it is decoded.
	var src io.Reader = r.Body
	if !chunked {
		ws := []io.Writer{md}
		for _, h := range sums {
			ws = append(ws, h)
		}
		src = io.TeeReader(r.Body, io.MultiWriter(ws...))
	}
	raw, err := readAllSized(src, r.ContentLength, maxObjectBytes+1<<20)
	if err != nil {
		return nil, "", &s3Fail{http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header."}
	}
	body := raw
	if chunked {
		var trailer map[string]string
		hint, _ := strconv.Atoi(r.Header.Get("X-Amz-Decoded-Content-Length"))
		body, trailer, err = decodeAWSChunkedSized(raw, maxObjectBytes, hint)
		if err != nil {
			return nil, "", &s3Fail{http.StatusBadRequest, "IncompleteBody", "The aws-chunked body could not be decoded: " + err.Error()}
		}
		if dl := r.Header.Get("X-Amz-Decoded-Content-Length"); dl != "" && dl != strconv.Itoa(len(body)) {
			return nil, "", &s3Fail{http.StatusBadRequest, "IncompleteBody", "The decoded length is not x-amz-decoded-content-length."}
		}
		for k, v := range trailer {
			r.Header.Set(k, v)
		}
		md.Write(body)
		for name, h := range s3Checksums {
			if r.Header.Get(name) != "" {
				sums[name] = h()
				sums[name].Write(body)
			}
		}
	}
	if len(body) > maxObjectBytes {
		return nil, "", tooBig
	}
	for name, sum := range sums {
		want := r.Header.Get(name)
		var got [4]byte
		binary.BigEndian.PutUint32(got[:], sum.Sum32())
		if base64.StdEncoding.EncodeToString(got[:]) != want {
			return nil, "", &s3Fail{http.StatusBadRequest, "BadDigest", "The " + strings.ToUpper(strings.TrimPrefix(strings.ToLower(name), "x-amz-checksum-")) + " you specified did not match the calculated checksum."}
		}
	}
	return body, `"` + hex.EncodeToString(md.Sum(nil)) + `"`, nil
}

// s3Checksums are the x-amz-checksum-* a request may name that the slice
// verifies, as S3 verifies them.
var s3Checksums = map[string]func() hash.Hash32{
	"X-Amz-Checksum-Crc32":  crc32.NewIEEE,
	"X-Amz-Checksum-Crc32c": func() hash.Hash32 { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
}

// decodeAWSChunked decodes the aws-chunked content encoding: hex-sized
// chunks (each size may carry ";chunk-signature=..."), a zero-sized last
// chunk, then trailer lines up to an empty line. It returns the payload and
// the trailers by lower-case name; at most limit payload bytes.
func decodeAWSChunked(raw []byte, limit int) ([]byte, map[string]string, error) {
	return decodeAWSChunkedSized(raw, limit, 0)
}

// decodeAWSChunkedSized is decodeAWSChunked with the payload's expected
// length (x-amz-decoded-content-length), allocated once when it is within
// limit; the chunks are still counted and bounded as they come.
func decodeAWSChunkedSized(raw []byte, limit, hint int) ([]byte, map[string]string, error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	line := func() (string, error) {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", errors.New("truncated")
		}
		return strings.TrimRight(l, "\r\n"), nil
	}
	var out []byte
	if hint > 0 && hint <= limit {
		out = make([]byte, 0, hint)
	}
	for {
		l, err := line()
		if err != nil {
			return nil, nil, err
		}
		sizeHex, _, _ := strings.Cut(l, ";")
		size, err := strconv.ParseUint(strings.TrimSpace(sizeHex), 16, 31)
		if err != nil {
			return nil, nil, fmt.Errorf("bad chunk size %q", sizeHex)
		}
		if size == 0 {
			break
		}
		if len(out)+int(size) > limit {
			return nil, nil, errors.New("payload too large")
		}
		n := len(out)
		out = slices.Grow(out, int(size))[:n+int(size)]
		if _, err := io.ReadFull(br, out[n:]); err != nil {
			return nil, nil, errors.New("truncated chunk")
		}
		if end, err := line(); err != nil || end != "" {
			return nil, nil, errors.New("chunk not followed by CRLF")
		}
	}
	trailer := map[string]string{}
	for {
		l, err := line()
		if err != nil {
			// Some writers end after the last trailer without the empty line.
			return out, trailer, nil
		}
		if l == "" {
			return out, trailer, nil
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, nil, fmt.Errorf("bad trailer %q", l)
		}
		if lk := strings.ToLower(strings.TrimSpace(k)); lk != "x-amz-trailer-signature" {
			trailer[lk] = strings.TrimSpace(v)
		}
		if len(trailer) > 16 {
			return nil, nil, errors.New("too many trailers")
		}
	}
}

// readAllSized reads r to its end, at most limit bytes plus one (so an
// over-long body shows); a known length (Content-Length) within the limit
// is allocated once instead of grown by doubling.
func readAllSized(r io.Reader, length int64, limit int) ([]byte, error) {
	lr := io.LimitReader(r, int64(limit)+1)
	if length <= 0 || length > int64(limit) {
		return io.ReadAll(lr)
	}
	buf := make([]byte, length, length+1)
	if _, err := io.ReadFull(lr, buf); err != nil {
		return nil, err
	}
	// Anything past the stated length is read on, as ReadAll would.
	rest, err := io.ReadAll(lr)
	return append(buf, rest...), err
}

// copySourceLocked is the object a copy's x-amz-copy-source names
// (bucket/key, URL-encoded, a leading slash allowed). Called with s.mu held.
func (s *Server) copySourceLocked(r *http.Request) (*s3Object, *s3Fail) {
	src, err := url.PathUnescape(strings.TrimPrefix(r.Header.Get("x-amz-copy-source"), "/"))
	srcBucket, srcKey, ok := strings.Cut(src, "/")
	if err != nil || !ok || srcKey == "" || strings.Contains(srcKey, "?versionId=") {
		return nil, &s3Fail{http.StatusBadRequest, "InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey"}
	}
	b := s.s3.buckets[srcBucket]
	if b == nil {
		return nil, &errNoSuchBucket
	}
	obj := b.objects[srcKey]
	if obj == nil {
		return nil, &errNoSuchKey
	}
	return obj, nil
}

// copyRange reads an UploadPartCopy range "bytes=first-last" within size;
// none is the whole object.
func copyRange(v string, size int64) (lo, hi int64, ok bool) {
	if v == "" {
		return 0, size - 1, size > 0
	}
	first, last, cut := strings.Cut(strings.TrimPrefix(v, "bytes="), "-")
	if !cut || !strings.HasPrefix(v, "bytes=") {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseInt(first, 10, 64)
	hi, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi >= size {
		return 0, 0, false
	}
	return lo, hi, true
}
