package iam

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Service is the emulator's IAM slice: its own roles under its own lock
// (no other slice reads them), served from the emulator's one endpoint.
type Service struct {
	// Account is the account the roles belong to.
	Account string
	// Now is the emulator's clock; RequestID mints the answers' request
	// ids (shared with STS); Fault, when set, answers an injected fault
	// for an action and reports whether it did.
	Now       func() time.Time
	RequestID func() string
	Fault     func(w http.ResponseWriter, action string) bool

	mu    sync.Mutex
	seq   uint64
	roles map[string]*iamRole // by name
}

// The emulator's slice of IAM: the roles `microvm setup` makes, `doctor`
// checks and `setup --destroy` removes, in IAM's own awsQuery protocol (a
// form body naming Action and Version 2010-05-08, an XML answer in IAM's
// namespace) for requests signed for "iam". The actions are CreateRole,
// GetRole, DeleteRole, UpdateAssumeRolePolicy, TagRole, ListRoleTags,
// PutRolePolicy, GetRolePolicy, DeleteRolePolicy, ListRolePolicies and
// SimulatePrincipalPolicy; any other is refused as IAM refuses an action it
// does not know (400 InvalidAction).
//
// Every request is held to its action's input members as IAM's API
// reference declares them (iamActions): a required member missing, a
// length, pattern or range broken, or a member the action does not have is
// 400 ValidationError before anything changes, so a client that sends what
// IAM would refuse fails here too. The required members match
// aws-sdk-go-v2's IAM validators; the bounds and patterns are the IAM API
// reference's. A member IAM has that the slice does not model (a
// permissions boundary, a simulation's context) is 400 InvalidInput naming
// it, never ignored. Policy documents are held to the grammar
// IAM checks on write (JSON, a Version, Statements with an Effect, Actions
// and, for a trust policy, a Principal), answered as MalformedPolicyDocument.
// Documents are answered URL-encoded, as IAM answers them.
//
// SimulatePrincipalPolicy evaluates a role's inline policies the way IAM's
// evaluation does for identity policies without conditions: an explicit
// Deny wins, then an Allow, else implicitDeny; Action and Resource match
// with IAM's * and ? wildcards (actions case-insensitively). A statement
// with a Condition never matches here (the slice evaluates no context).

// SigningName is the service name a request for this slice is signed for.
const SigningName = "iam"

const (
	iamVersion   = "2010-05-08"
	iamNamespace = "https://iam.amazonaws.com/doc/2010-05-08/"
)

type iamRole struct {
	name, id, path, description string
	trust                       string
	created                     time.Time
	tags                        []iamTag
	policies                    map[string]string // inline policy name -> document
}

type iamTag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

// iamMember is one input member: how it is sent, and IAM's constraints.
type iamMember struct {
	required bool
	min, max int            // length bounds in characters (0 max: none)
	pattern  *regexp.Regexp // whole-value pattern, nil for none
	list     bool           // sent as Name.member.N
	tags     bool           // sent as Name.member.N.Key / .Value
	intMin   int            // > 0: an integer member and its range
	intMax   int
	// unsupported marks a member IAM has that this slice does not model
	// (a permissions boundary, simulation context): it is refused as
	// InvalidInput naming the limit, never silently ignored.
	unsupported bool
}

var (
	iamNamePattern   = regexp.MustCompile(`^[\w+=,.@-]+$`)
	iamPathPattern   = regexp.MustCompile(`^(/|/[\x21-\x7E]+/)$`)
	iamMarkerPattern = regexp.MustCompile(`^[\x20-\x{00FF}]+$`)
	iamTextPattern   = regexp.MustCompile(`^[\t\n\r\x20-\x{00FF}]*$`)
)

func roleName() iamMember {
	return iamMember{required: true, min: 1, max: 64, pattern: iamNamePattern}
}
func policyDoc() iamMember {
	return iamMember{required: true, min: 1, max: 131072, pattern: iamTextPattern}
}
func policyName() iamMember {
	return iamMember{required: true, min: 1, max: 128, pattern: iamNamePattern}
}
func paging() map[string]iamMember {
	return map[string]iamMember{"Marker": {min: 1, max: 320, pattern: iamMarkerPattern}, "MaxItems": {intMin: 1, intMax: 1000}}
}

func with(m map[string]iamMember, more map[string]iamMember) map[string]iamMember {
	for k, v := range more {
		m[k] = v
	}
	return m
}

// iamActions are the actions the slice answers, each with its input members.
var iamActions = map[string]map[string]iamMember{
	"CreateRole": {
		"RoleName": roleName(), "AssumeRolePolicyDocument": policyDoc(),
		"Path":                {min: 1, max: 512, pattern: iamPathPattern},
		"Description":         {max: 1000, pattern: regexp.MustCompile(`^[\x{0009}\x{000A}\x{000D}\x{0020}-\x{007E}\x{00A1}-\x{00FF}]*$`)},
		"MaxSessionDuration":  {intMin: 3600, intMax: 43200},
		"Tags":                {tags: true},
		"PermissionsBoundary": {unsupported: true},
	},
	"GetRole":                {"RoleName": roleName()},
	"DeleteRole":             {"RoleName": roleName()},
	"UpdateAssumeRolePolicy": {"RoleName": roleName(), "PolicyDocument": policyDoc()},
	"TagRole":                {"RoleName": roleName(), "Tags": {required: true, tags: true}},
	"ListRoleTags":           with(map[string]iamMember{"RoleName": roleName()}, paging()),
	"PutRolePolicy":          {"RoleName": roleName(), "PolicyName": policyName(), "PolicyDocument": policyDoc()},
	"GetRolePolicy":          {"RoleName": roleName(), "PolicyName": policyName()},
	"DeleteRolePolicy":       {"RoleName": roleName(), "PolicyName": policyName()},
	"ListRolePolicies":       with(map[string]iamMember{"RoleName": roleName()}, paging()),
	"SimulatePrincipalPolicy": with(map[string]iamMember{
		"PolicySourceArn": {required: true, min: 20, max: 2048},
		"ActionNames":     {required: true, list: true, min: 3, max: 128},
		"ResourceArns":    {list: true, min: 1, max: 2048},
		// IAM's other simulation inputs: context, caller, extra policies.
		"CallerArn": {unsupported: true}, "ContextEntries": {unsupported: true, list: true},
		"PolicyInputList": {unsupported: true, list: true}, "PermissionsBoundaryPolicyInputList": {unsupported: true, list: true},
		"ResourcePolicy": {unsupported: true}, "ResourceOwner": {unsupported: true}, "ResourceHandlingOption": {unsupported: true},
	}, paging()),
}

// iamInput is one request's members: scalars, lists and tags.
type iamInput struct {
	scalar map[string]string
	lists  map[string][]string
	tags   []iamTag
}

// iamFail is an IAM error: its status, code and message.
type iamFail struct {
	status        int
	code, message string
}

func iamValidation(format string, args ...any) *iamFail {
	return &iamFail{http.StatusBadRequest, "ValidationError", fmt.Sprintf(format, args...)}
}

// lowerFirst is a member's name as IAM's validation messages spell it.
func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// parseIAMInput reads form against action's members.
func parseIAMInput(action string, form url.Values) (*iamInput, *iamFail) {
	members := iamActions[action]
	in := &iamInput{scalar: map[string]string{}, lists: map[string][]string{}}
	listAt := map[string]map[int]string{}
	tagAt := map[int]*iamTag{}
	for k, vs := range form {
		if k == "Action" || k == "Version" {
			continue
		}
		v := vs[0]
		name, rest, _ := strings.Cut(k, ".")
		m, ok := members[name]
		if !ok {
			return nil, iamValidation("%s has no member %s", action, name)
		}
		if m.unsupported {
			return nil, &iamFail{http.StatusBadRequest, "InvalidInput", fmt.Sprintf("%s: the emulator's IAM slice does not model %s", action, name)}
		}
		switch {
		case m.list || m.tags:
			parts := strings.Split(rest, ".")
			if len(parts) < 2 || parts[0] != "member" {
				return nil, iamValidation("%s is a list and is sent as %s.member.N", name, name)
			}
			n, err := strconv.Atoi(parts[1])
			if err != nil || n < 1 || n > 1000 {
				return nil, iamValidation("%s: %q is not a list index", k, parts[1])
			}
			if m.tags {
				if len(parts) != 3 || (parts[2] != "Key" && parts[2] != "Value") {
					return nil, iamValidation("%s: a tag is sent as Key and Value", k)
				}
				if tagAt[n] == nil {
					tagAt[n] = &iamTag{}
				}
				if parts[2] == "Key" {
					tagAt[n].Key = v
				} else {
					tagAt[n].Value = v
				}
				continue
			}
			if listAt[name] == nil {
				listAt[name] = map[int]string{}
			}
			listAt[name][n] = v
		case rest != "":
			return nil, iamValidation("%s has no member %s", action, k)
		default:
			in.scalar[name] = v
		}
	}
	for name, at := range listAt {
		idx := slices.Sorted(func(yield func(int) bool) {
			for i := range at {
				if !yield(i) {
					return
				}
			}
		})
		for i, n := range idx {
			if n != i+1 {
				return nil, iamValidation("%s.member indexes must run 1, 2, 3...", name)
			}
			in.lists[name] = append(in.lists[name], at[n])
		}
	}
	for n := 1; n <= len(tagAt); n++ {
		t := tagAt[n]
		if t == nil {
			return nil, iamValidation("Tags.member indexes must run 1, 2, 3...")
		}
		if l := utf8.RuneCountInString(t.Key); l < 1 || l > 128 {
			return nil, iamValidation("1 validation error detected: Value '%s' at 'tags.%d.member.key' failed to satisfy constraint: Member must have length between 1 and 128", t.Key, n)
		}
		if utf8.RuneCountInString(t.Value) > 256 {
			return nil, iamValidation("1 validation error detected: Value at 'tags.%d.member.value' failed to satisfy constraint: Member must have length less than or equal to 256", n)
		}
		in.tags = append(in.tags, *t)
	}
	if len(in.tags) > 50 {
		return nil, &iamFail{http.StatusBadRequest, "LimitExceeded", "Cannot exceed quota for TagsPerRole: 50."}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range members {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		m := members[name]
		at := lowerFirst(name)
		switch {
		case m.tags:
			if m.required && len(in.tags) == 0 {
				return nil, iamValidation("1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", at)
			}
		case m.list:
			vs, sent := in.lists[name]
			if m.required && !sent {
				return nil, iamValidation("1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", at)
			}
			for _, v := range vs {
				if f := m.check(at, v); f != nil {
					return nil, f
				}
			}
		default:
			v, sent := in.scalar[name]
			if !sent {
				if m.required {
					return nil, iamValidation("1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", at)
				}
				continue
			}
			if f := m.check(at, v); f != nil {
				return nil, f
			}
		}
	}
	return in, nil
}

func (m iamMember) check(at, v string) *iamFail {
	if m.intMin > 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n < m.intMin || n > m.intMax {
			return iamValidation("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must have value between %d and %d", v, at, m.intMin, m.intMax)
		}
		return nil
	}
	l := utf8.RuneCountInString(v)
	if l < m.min || (m.max > 0 && l > m.max) {
		return iamValidation("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must have length between %d and %d", v, at, m.min, m.max)
	}
	if m.pattern != nil && !m.pattern.MatchString(v) {
		return iamValidation("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must satisfy regular expression pattern: %s", v, at, strings.Trim(m.pattern.String(), "^$"))
	}
	return nil
}

// policyDocument is the grammar IAM checks a policy against on write.
type policyDocument struct {
	Version   string
	Statement []policyStatement
}

type policyStatement struct {
	Sid       string
	Effect    string
	Principal any
	Action    []string
	NotAction []string
	Resource  []string
	Condition map[string]any
}

// oneOrMany reads a member IAM accepts as a string or a list of strings.
func oneOrMany(v any) ([]string, bool) {
	switch t := v.(type) {
	case nil:
		return nil, true
	case string:
		return []string{t}, true
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// parsePolicy reads doc as IAM does; trust policies must name a Principal,
// identity policies must not.
func parsePolicy(doc string, trust bool) (*policyDocument, *iamFail) {
	bad := func(msg string) (*policyDocument, *iamFail) {
		return nil, &iamFail{http.StatusBadRequest, "MalformedPolicyDocument", msg}
	}
	var raw struct {
		Version   string
		Statement any
	}
	if err := json.Unmarshal([]byte(doc), &raw); err != nil {
		return bad("Syntax errors in policy.")
	}
	if raw.Version != "2012-10-17" && raw.Version != "2008-10-17" {
		return bad("The policy must contain a valid version string")
	}
	var stmts []map[string]any
	switch t := raw.Statement.(type) {
	case map[string]any:
		stmts = []map[string]any{t}
	case []any:
		for _, e := range t {
			m, ok := e.(map[string]any)
			if !ok {
				return bad("Syntax errors in policy.")
			}
			stmts = append(stmts, m)
		}
	default:
		return bad("Missing required field Statement")
	}
	out := &policyDocument{Version: raw.Version}
	for _, m := range stmts {
		var st policyStatement
		st.Sid, _ = m["Sid"].(string)
		st.Effect, _ = m["Effect"].(string)
		if st.Effect != "Allow" && st.Effect != "Deny" {
			return bad("Invalid effect: " + fmt.Sprint(m["Effect"]))
		}
		var ok bool
		if st.Action, ok = oneOrMany(m["Action"]); !ok {
			return bad("Syntax errors in policy.")
		}
		if st.NotAction, ok = oneOrMany(m["NotAction"]); !ok {
			return bad("Syntax errors in policy.")
		}
		if len(st.Action) == 0 && len(st.NotAction) == 0 {
			return bad("Policy statement must contain actions.")
		}
		if st.Resource, ok = oneOrMany(m["Resource"]); !ok {
			return bad("Syntax errors in policy.")
		}
		st.Principal = m["Principal"]
		switch {
		case trust && st.Principal == nil:
			return bad("AssumeRolepolicy contained an invalid principal element.")
		case !trust && st.Principal != nil:
			return bad("Policy document should not specify a principal.")
		case !trust && len(st.Resource) == 0:
			return bad("Policy statement must contain resources.")
		}
		st.Condition, _ = m["Condition"].(map[string]any)
		out.Statement = append(out.Statement, st)
	}
	return out, nil
}

// wildMatch matches IAM's * and ? wildcards.
func wildMatch(pattern, s string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	ok, _ := regexp.MatchString(re, s)
	return ok
}

// decide evaluates an action on a resource against a role's inline
// policies: explicit Deny, then Allow, else implicitDeny.
func (r *iamRole) decide(action, resource string) (decision string, matched []string) {
	allowed := false
	for _, name := range slices.Sorted(mapKeys(r.policies)) {
		doc, f := parsePolicy(r.policies[name], false)
		if f != nil {
			continue
		}
		for _, st := range doc.Statement {
			if st.Condition != nil {
				continue
			}
			actionHit := false
			for _, a := range st.Action {
				actionHit = actionHit || wildMatch(strings.ToLower(a), strings.ToLower(action))
			}
			if len(st.NotAction) > 0 {
				actionHit = true
				for _, a := range st.NotAction {
					if wildMatch(strings.ToLower(a), strings.ToLower(action)) {
						actionHit = false
					}
				}
			}
			resHit := false
			for _, p := range st.Resource {
				resHit = resHit || wildMatch(p, resource)
			}
			if !actionHit || !resHit {
				continue
			}
			if st.Effect == "Deny" {
				return "explicitDeny", []string{name}
			}
			allowed = true
			matched = append(matched, name)
		}
	}
	if allowed {
		return "allowed", matched
	}
	return "implicitDeny", nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// The XML answers, named as IAM's model names their members.
type (
	iamRoleXML struct {
		Path                     string   `xml:"Path"`
		RoleName                 string   `xml:"RoleName"`
		RoleID                   string   `xml:"RoleId"`
		Arn                      string   `xml:"Arn"`
		CreateDate               string   `xml:"CreateDate"`
		AssumeRolePolicyDocument string   `xml:"AssumeRolePolicyDocument"`
		Description              string   `xml:"Description,omitempty"`
		MaxSessionDuration       int      `xml:"MaxSessionDuration"`
		Tags                     []iamTag `xml:"Tags>member,omitempty"`
	}
	iamEvalResult struct {
		EvalActionName    string          `xml:"EvalActionName"`
		EvalResourceName  string          `xml:"EvalResourceName"`
		EvalDecision      string          `xml:"EvalDecision"`
		MatchedStatements []iamStatement  `xml:"MatchedStatements>member"`
		MissingContext    []string        `xml:"MissingContextValues>member"`
		OrgsDecision      *iamOrgDecision `xml:"OrganizationsDecisionDetail,omitempty"`
	}
	iamStatement struct {
		SourcePolicyID   string `xml:"SourcePolicyId"`
		SourcePolicyType string `xml:"SourcePolicyType"`
	}
	iamOrgDecision struct {
		AllowedByOrganizations bool `xml:"AllowedByOrganizations"`
	}
	iamErrorResponse struct {
		XMLName xml.Name `xml:"https://iam.amazonaws.com/doc/2010-05-08/ ErrorResponse"`
		Error   struct {
			Type    string `xml:"Type"`
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		} `xml:"Error"`
		RequestID string `xml:"RequestId"`
	}
)

func (s *Service) roleXML(r *iamRole) iamRoleXML {
	return iamRoleXML{Path: r.path, RoleName: r.name, RoleID: r.id, Arn: s.roleARN(r),
		CreateDate: r.created.UTC().Format(time.RFC3339), AssumeRolePolicyDocument: url.QueryEscape(r.trust),
		Description: r.description, MaxSessionDuration: 3600, Tags: r.tags}
}

func (s *Service) roleARN(r *iamRole) string {
	return "arn:aws:iam::" + s.Account + ":role" + r.path + r.name
}

func (s *Service) writeIAMError(w http.ResponseWriter, f iamFail) {
	var e iamErrorResponse
	e.Error.Type, e.Error.Code, e.Error.Message = "Sender", f.code, f.message
	if f.status >= 500 {
		e.Error.Type = "Receiver"
	}
	e.RequestID = s.RequestID()
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(f.status)
	_ = xml.NewEncoder(w).Encode(e)
}

// writeIAM answers action's <ActionResponse> with result inside
// <ActionResult>, or only the metadata when result is nil.
func (s *Service) writeIAM(w http.ResponseWriter, action string, result any) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusOK)
	var b strings.Builder
	b.WriteString(xml.Header)
	fmt.Fprintf(&b, `<%sResponse xmlns="%s">`, action, iamNamespace)
	if result != nil {
		// The result struct is anonymous: its element is named here.
		var inner strings.Builder
		_ = xml.NewEncoder(&inner).EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
		b.WriteString(inner.String())
	}
	fmt.Fprintf(&b, "<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>", s.RequestID(), action)
	_, _ = io.WriteString(w, b.String())
}

// Role returns whether the IAM slice holds a role of that name, and its
// inline policies' names; tests read it.
func (s *Service) Role(name string) (exists bool, policies []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[name]
	if r == nil {
		return false, nil
	}
	return true, slices.Sorted(mapKeys(r.policies))
}

// serveIAM answers one request signed for iam.
func (s *Service) Serve(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method != http.MethodPost {
		s.writeIAMError(w, iamFail{http.StatusBadRequest, "InvalidAction", "IAM answers POST with a form body"})
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		s.writeIAMError(w, iamFail{http.StatusBadRequest, "MalformedInput", "the request body is not a form"})
		return
	}
	action := form.Get("Action")
	if s.Fault != nil && s.Fault(w, action) {
		return
	}
	if _, ok := iamActions[action]; !ok || form.Get("Version") != iamVersion {
		s.writeIAMError(w, iamFail{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, form.Get("Version"))})
		return
	}
	in, f := parseIAMInput(action, form)
	if f != nil {
		s.writeIAMError(w, *f)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roles == nil {
		s.roles = map[string]*iamRole{}
	}
	name := in.scalar["RoleName"]
	if action == "SimulatePrincipalPolicy" {
		arn := in.scalar["PolicySourceArn"]
		prefix := "arn:aws:iam::" + s.Account + ":role/"
		if !strings.HasPrefix(arn, prefix) {
			s.writeIAMError(w, iamFail{http.StatusBadRequest, "InvalidInput", "Invalid ARN: " + arn + " (this slice simulates roles of account " + s.Account + ")"})
			return
		}
		name = arn[strings.LastIndexByte(arn, '/')+1:]
	}
	role := s.roles[name]
	noRole := iamFail{http.StatusNotFound, "NoSuchEntity", fmt.Sprintf("The role with name %s cannot be found.", name)}
	if action != "CreateRole" && role == nil {
		s.writeIAMError(w, noRole)
		return
	}
	switch action {
	case "CreateRole":
		if role != nil {
			s.writeIAMError(w, iamFail{http.StatusConflict, "EntityAlreadyExists", fmt.Sprintf("Role with name %s already exists.", name)})
			return
		}
		doc := in.scalar["AssumeRolePolicyDocument"]
		if _, f := parsePolicy(doc, true); f != nil {
			s.writeIAMError(w, *f)
			return
		}
		path := in.scalar["Path"]
		if path == "" {
			path = "/"
		}
		s.seq++
		role = &iamRole{name: name, id: fmt.Sprintf("AROA%017X", s.seq), path: path, description: in.scalar["Description"],
			trust: doc, created: s.Now(), tags: in.tags, policies: map[string]string{}}
		s.roles[name] = role
		s.writeIAM(w, action, struct {
			Role iamRoleXML `xml:"Role"`
		}{s.roleXML(role)})
	case "GetRole":
		s.writeIAM(w, action, struct {
			Role iamRoleXML `xml:"Role"`
		}{s.roleXML(role)})
	case "DeleteRole":
		if len(role.policies) > 0 {
			s.writeIAMError(w, iamFail{http.StatusConflict, "DeleteConflict", "Cannot delete entity, must delete policies first."})
			return
		}
		delete(s.roles, name)
		s.writeIAM(w, action, nil)
	case "UpdateAssumeRolePolicy":
		doc := in.scalar["PolicyDocument"]
		if _, f := parsePolicy(doc, true); f != nil {
			s.writeIAMError(w, *f)
			return
		}
		role.trust = doc
		s.writeIAM(w, action, nil)
	case "TagRole":
		for _, t := range in.tags {
			i := slices.IndexFunc(role.tags, func(o iamTag) bool { return o.Key == t.Key })
			if i >= 0 {
				role.tags[i] = t
			} else {
				role.tags = append(role.tags, t)
			}
		}
		if len(role.tags) > 50 {
			s.writeIAMError(w, iamFail{http.StatusBadRequest, "LimitExceeded", "Cannot exceed quota for TagsPerRole: 50."})
			return
		}
		s.writeIAM(w, action, nil)
	case "ListRoleTags":
		s.writeIAM(w, action, struct {
			Tags        []iamTag `xml:"Tags>member"`
			IsTruncated bool     `xml:"IsTruncated"`
		}{Tags: role.tags})
	case "PutRolePolicy":
		doc := in.scalar["PolicyDocument"]
		if _, f := parsePolicy(doc, false); f != nil {
			s.writeIAMError(w, *f)
			return
		}
		role.policies[in.scalar["PolicyName"]] = doc
		s.writeIAM(w, action, nil)
	case "GetRolePolicy", "DeleteRolePolicy":
		pn := in.scalar["PolicyName"]
		doc, ok := role.policies[pn]
		if !ok {
			s.writeIAMError(w, iamFail{http.StatusNotFound, "NoSuchEntity", fmt.Sprintf("The role policy with name %s cannot be found.", pn)})
			return
		}
		if action == "DeleteRolePolicy" {
			delete(role.policies, pn)
			s.writeIAM(w, action, nil)
			return
		}
		s.writeIAM(w, action, struct {
			RoleName       string `xml:"RoleName"`
			PolicyName     string `xml:"PolicyName"`
			PolicyDocument string `xml:"PolicyDocument"`
		}{name, pn, url.QueryEscape(doc)})
	case "ListRolePolicies":
		names := slices.Sorted(mapKeys(role.policies))
		s.writeIAM(w, action, struct {
			PolicyNames []string `xml:"PolicyNames>member"`
			IsTruncated bool     `xml:"IsTruncated"`
		}{PolicyNames: names})
	case "SimulatePrincipalPolicy":
		resources := in.lists["ResourceArns"]
		if len(resources) == 0 {
			resources = []string{"*"}
		}
		var results []iamEvalResult
		for _, a := range in.lists["ActionNames"] {
			for _, res := range resources {
				d, matched := role.decide(a, res)
				er := iamEvalResult{EvalActionName: a, EvalResourceName: res, EvalDecision: d}
				sort.Strings(matched)
				for _, m := range slices.Compact(matched) {
					er.MatchedStatements = append(er.MatchedStatements, iamStatement{SourcePolicyID: m, SourcePolicyType: "role"})
				}
				results = append(results, er)
			}
		}
		s.writeIAM(w, action, struct {
			EvaluationResults []iamEvalResult `xml:"EvaluationResults>member"`
			IsTruncated       bool            `xml:"IsTruncated"`
		}{EvaluationResults: results})
	}
}
