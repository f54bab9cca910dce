package emulator

import (
	"encoding/xml"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The bucket-level S3 operations `microvm setup`, `doctor` and `gc` send:
// a bucket's tags, default encryption, public access block and lifecycle
// rules (each a Put and a Get, tags a Delete too), and ListObjectsV2. Each
// configuration body is held to its S3 model shape (the root element and
// the members S3 requires) and answered back as it was stored. A bucket
// that never had its encryption set answers SSE-S3, as every S3 bucket
// made since 2023 does.

type s3BucketConfig struct {
	tags       []s3Tag
	encryption string // inner XML of ServerSideEncryptionConfiguration, "" unset
	pab        *publicAccessBlock
	lifecycle  string // inner XML of LifecycleConfiguration, "" unset
}

type (
	s3Tag struct {
		Key   string `xml:"Key"`
		Value string `xml:"Value"`
	}
	s3Tagging struct {
		XMLName xml.Name `xml:"Tagging"`
		TagSet  []s3Tag  `xml:"TagSet>Tag"`
	}
	sseConfig struct {
		XMLName xml.Name `xml:"ServerSideEncryptionConfiguration"`
		Inner   string   `xml:",innerxml"`
		Rules   []struct {
			Default *struct {
				SSEAlgorithm string `xml:"SSEAlgorithm"`
			} `xml:"ApplyServerSideEncryptionByDefault"`
		} `xml:"Rule"`
	}
	publicAccessBlock struct {
		XMLName               xml.Name `xml:"PublicAccessBlockConfiguration"`
		BlockPublicAcls       bool     `xml:"BlockPublicAcls"`
		IgnorePublicAcls      bool     `xml:"IgnorePublicAcls"`
		BlockPublicPolicy     bool     `xml:"BlockPublicPolicy"`
		RestrictPublicBuckets bool     `xml:"RestrictPublicBuckets"`
	}
	lifecycleConfig struct {
		XMLName xml.Name `xml:"LifecycleConfiguration"`
		Inner   string   `xml:",innerxml"`
		Rules   []struct {
			ID     string `xml:"ID"`
			Status string `xml:"Status"`
		} `xml:"Rule"`
	}
	listBucketResult struct {
		XMLName               xml.Name         `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
		Name                  string           `xml:"Name"`
		Prefix                string           `xml:"Prefix"`
		KeyCount              int              `xml:"KeyCount"`
		MaxKeys               int              `xml:"MaxKeys"`
		IsTruncated           bool             `xml:"IsTruncated"`
		ContinuationToken     string           `xml:"ContinuationToken,omitempty"`
		NextContinuationToken string           `xml:"NextContinuationToken,omitempty"`
		Contents              []listedS3Object `xml:"Contents"`
	}
	listedS3Object struct {
		Key          string `xml:"Key"`
		LastModified string `xml:"LastModified"`
		ETag         string `xml:"ETag"`
		Size         int    `xml:"Size"`
		StorageClass string `xml:"StorageClass"`
	}
)

// s3BucketConfigOperation names a bucket-level configuration operation,
// "" for none.
func s3BucketConfigOperation(method string, q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	if _, ok := q["list-type"]; ok && method == http.MethodGet {
		for k := range q {
			if !slices.Contains([]string{"list-type", "prefix", "continuation-token", "max-keys", "start-after", "encoding-type", "fetch-owner"}, k) {
				return ""
			}
		}
		if q.Get("list-type") != "2" {
			return ""
		}
		return "ListObjectsV2"
	}
	if len(q) != 1 {
		return ""
	}
	ops := map[string]map[string]string{
		"tagging":           {http.MethodPut: "PutBucketTagging", http.MethodGet: "GetBucketTagging", http.MethodDelete: "DeleteBucketTagging"},
		"encryption":        {http.MethodPut: "PutBucketEncryption", http.MethodGet: "GetBucketEncryption"},
		"publicAccessBlock": {http.MethodPut: "PutPublicAccessBlock", http.MethodGet: "GetPublicAccessBlock"},
		"lifecycle":         {http.MethodPut: "PutBucketLifecycleConfiguration", http.MethodGet: "GetBucketLifecycleConfiguration"},
	}
	for k := range q {
		return ops[k][method]
	}
	return ""
}

var errMalformedXML = s3Fail{http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema"}

// serveS3BucketConfig answers one bucket-level configuration operation,
// called with s.mu held.
func (s *Server) serveS3BucketConfig(w http.ResponseWriter, r *http.Request, op, bucket string, b *s3Bucket, body []byte, q url.Values) {
	fail := func(f s3Fail) { s.writeS3Error(w, r, f, bucket, "") }
	c := &b.config
	switch op {
	case "PutBucketTagging":
		var t s3Tagging
		if err := xml.Unmarshal(body, &t); err != nil {
			fail(errMalformedXML)
			return
		}
		seen := map[string]bool{}
		for _, tag := range t.TagSet {
			if tag.Key == "" || len(tag.Key) > 128 || len(tag.Value) > 256 || seen[tag.Key] {
				fail(s3Fail{http.StatusBadRequest, "InvalidTag", "The TagSet does not satisfy the tag constraints (a unique key of 1 to 128 characters, a value of at most 256)"})
				return
			}
			seen[tag.Key] = true
		}
		if len(t.TagSet) > 50 {
			fail(s3Fail{http.StatusBadRequest, "BadRequest", "Object tags cannot be greater than 50"})
			return
		}
		c.tags = t.TagSet
		w.WriteHeader(http.StatusNoContent)
	case "GetBucketTagging":
		if len(c.tags) == 0 {
			fail(s3Fail{http.StatusNotFound, "NoSuchTagSet", "The TagSet does not exist"})
			return
		}
		writeS3XML(w, struct {
			XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ Tagging"`
			TagSet  []s3Tag  `xml:"TagSet>Tag"`
		}{TagSet: c.tags})
	case "DeleteBucketTagging":
		c.tags = nil
		w.WriteHeader(http.StatusNoContent)
	case "PutBucketEncryption":
		var e sseConfig
		if err := xml.Unmarshal(body, &e); err != nil || len(e.Rules) == 0 {
			fail(errMalformedXML)
			return
		}
		for _, rule := range e.Rules {
			if rule.Default != nil && !slices.Contains([]string{"AES256", "aws:kms", "aws:kms:dsse"}, rule.Default.SSEAlgorithm) {
				fail(errMalformedXML)
				return
			}
		}
		c.encryption = e.Inner
		w.WriteHeader(http.StatusOK)
	case "GetBucketEncryption":
		inner := c.encryption
		if inner == "" {
			inner = "<Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault><BucketKeyEnabled>false</BucketKeyEnabled></Rule>"
		}
		writeS3XML(w, struct {
			XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ServerSideEncryptionConfiguration"`
			Inner   string   `xml:",innerxml"`
		}{Inner: inner})
	case "PutPublicAccessBlock":
		var p publicAccessBlock
		if err := xml.Unmarshal(body, &p); err != nil {
			fail(errMalformedXML)
			return
		}
		c.pab = &p
		w.WriteHeader(http.StatusOK)
	case "GetPublicAccessBlock":
		if c.pab == nil {
			fail(s3Fail{http.StatusNotFound, "NoSuchPublicAccessBlockConfiguration", "The public access block configuration was not found"})
			return
		}
		p := *c.pab
		p.XMLName = xml.Name{Space: "http://s3.amazonaws.com/doc/2006-03-01/", Local: "PublicAccessBlockConfiguration"}
		writeS3XML(w, p)
	case "PutBucketLifecycleConfiguration":
		var l lifecycleConfig
		if err := xml.Unmarshal(body, &l); err != nil || len(l.Rules) == 0 || len(l.Rules) > 1000 {
			fail(errMalformedXML)
			return
		}
		for _, rule := range l.Rules {
			if rule.Status != "Enabled" && rule.Status != "Disabled" || len(rule.ID) > 255 {
				fail(errMalformedXML)
				return
			}
		}
		c.lifecycle = l.Inner
		w.WriteHeader(http.StatusOK)
	case "GetBucketLifecycleConfiguration":
		if c.lifecycle == "" {
			fail(s3Fail{http.StatusNotFound, "NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist"})
			return
		}
		writeS3XML(w, struct {
			XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ LifecycleConfiguration"`
			Inner   string   `xml:",innerxml"`
		}{Inner: c.lifecycle})
	case "ListObjectsV2":
		max := 1000
		if v := q.Get("max-keys"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				fail(s3Fail{http.StatusBadRequest, "InvalidArgument", "Provided max-keys not an integer or within integer range"})
				return
			}
			max = min(n, 1000)
		}
		after := q.Get("start-after")
		if tok := q.Get("continuation-token"); tok != "" {
			after = tok
		}
		keys := slices.Sorted(maps.Keys(b.objects))
		res := listBucketResult{Name: bucket, Prefix: q.Get("prefix"), MaxKeys: max, ContinuationToken: q.Get("continuation-token")}
		for _, k := range keys {
			if !strings.HasPrefix(k, res.Prefix) || k <= after {
				continue
			}
			if len(res.Contents) == max {
				res.IsTruncated = true
				res.NextContinuationToken = res.Contents[len(res.Contents)-1].Key
				break
			}
			o := b.objects[k]
			res.Contents = append(res.Contents, listedS3Object{Key: k, LastModified: o.modified.UTC().Format(time.RFC3339), ETag: o.etag, Size: o.size(), StorageClass: "STANDARD"})
		}
		res.KeyCount = len(res.Contents)
		writeS3XML(w, res)
	default:
		fail(errNotImplemented)
	}
}

// BucketKeys lists a bucket's object keys, sorted; tests read it.
func (s *Server) BucketKeys(bucket string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.s3.buckets[bucket]
	if b == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(b.objects))
}
