package emulator

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// The emulator's slice of STS: GetCallerIdentity, which `microvm doctor`
// asks to say whose credentials sign, in STS's awsQuery protocol (a form
// body, an XML answer) for requests signed for "sts". The identity is the
// emulator's account and a user named emulator, the same principal its
// AccessDenied messages name. Any other action is refused as STS refuses an
// action it does not know: 400 InvalidAction in an ErrorResponse.

type (
	stsResponseMetadata struct {
		RequestID string `xml:"RequestId"`
	}
	getCallerIdentityResult struct {
		Arn     string `xml:"Arn"`
		UserID  string `xml:"UserId"`
		Account string `xml:"Account"`
	}
	getCallerIdentityResponse struct {
		XMLName  xml.Name                `xml:"https://sts.amazonaws.com/doc/2011-06-15/ GetCallerIdentityResponse"`
		Result   getCallerIdentityResult `xml:"GetCallerIdentityResult"`
		Metadata stsResponseMetadata     `xml:"ResponseMetadata"`
	}
	stsErrorDetail struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	stsErrorResponse struct {
		XMLName   xml.Name       `xml:"https://sts.amazonaws.com/doc/2011-06-15/ ErrorResponse"`
		Error     stsErrorDetail `xml:"Error"`
		RequestID string         `xml:"RequestId"`
	}
)

// EmulatorPrincipal is the ARN GetCallerIdentity answers for account.
func EmulatorPrincipal(account string) string {
	return "arn:aws:iam::" + account + ":user/emulator"
}

func (s *Server) writeSTSError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(stsErrorResponse{Error: stsErrorDetail{Type: "Sender", Code: code, Message: msg}, RequestID: s.stsRequestID()})
}

func (s *Server) stsRequestID() string {
	n := s.reqIDs.Add(1)
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", n, n)
}

// serveSTS answers one request signed for sts.
func (s *Server) serveSTS(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if r.Method == http.MethodGet {
		form, err = r.URL.Query(), nil
	}
	if err != nil {
		s.writeSTSError(w, http.StatusBadRequest, "MalformedInput", "the request body is not a form")
		return
	}
	action := form.Get("Action")
	if s.fault(w, action) {
		return
	}
	if action != "GetCallerIdentity" {
		s.writeSTSError(w, http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, form.Get("Version")))
		return
	}
	if v := form.Get("Version"); v != "2011-06-15" {
		s.writeSTSError(w, http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, v))
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(getCallerIdentityResponse{
		Result:   getCallerIdentityResult{Arn: EmulatorPrincipal(s.opt.Account), UserID: "AIDAEMULATOR" + s.opt.Account, Account: s.opt.Account},
		Metadata: stsResponseMetadata{RequestID: s.stsRequestID()},
	})
}

// Role reports whether the IAM slice holds a role named name, and the names
// of its inline policies.
func (s *Server) Role(name string) (exists bool, policies []string) { return s.iam.Role(name) }
