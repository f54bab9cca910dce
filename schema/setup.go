package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// SetupContract is api/setup.yaml, decoded: the artifact bucket and the two
// roles a first run on AWS needs, their tag, trust and least permissions.
type SetupContract struct {
	APIVersion       string   `yaml:"api_version"`
	Tag              SetupTag `yaml:"tag"`
	DefaultPrefix    string   `yaml:"default_prefix"`
	ServicePrincipal string   `yaml:"service_principal"`
	TrustActions     []string `yaml:"trust_actions"`
	TrustCondition   struct {
		Test  string `yaml:"test"`
		Key   string `yaml:"key"`
		Value string `yaml:"value"`
	} `yaml:"trust_condition"`
	Bucket struct {
		Name            string `yaml:"name"`
		Env             string `yaml:"env"`
		SSEAlgorithm    string `yaml:"sse_algorithm"`
		ExpireAfterDays int    `yaml:"expire_after_days"`
		LifecycleRuleID string `yaml:"lifecycle_rule_id"`
	} `yaml:"bucket"`
	Roles []SetupRole `yaml:"roles"`
}

// SetupTag is the tag every made resource carries.
type SetupTag struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
}

// SetupRole is one role: its name, the variable that names it, its inline
// policy's statements, and what doctor simulates against it.
type SetupRole struct {
	ID         string           `yaml:"id"`
	Name       string           `yaml:"name"`
	Env        string           `yaml:"env"`
	PolicyName string           `yaml:"policy_name"`
	Doc        string           `yaml:"doc"`
	Statements []SetupStatement `yaml:"statements"`
	Needs      []SetupNeed      `yaml:"needs"`
}

// SetupStatement is one Allow statement of a role's inline policy.
type SetupStatement struct {
	Sid       string   `yaml:"sid"`
	Why       string   `yaml:"why"`
	Actions   []string `yaml:"actions"`
	Resources []string `yaml:"resources"`
}

// SetupNeed is one action on one resource a role must be allowed.
type SetupNeed struct {
	Action   string `yaml:"action"`
	Resource string `yaml:"resource"`
}

// setupPlaceholders are the ${...} names api/setup.yaml may use, and how the
// CloudFormation template spells each.
var setupPlaceholders = map[string]string{
	"Prefix":    "${Prefix}",
	"Account":   "${AWS::AccountId}",
	"Region":    "${AWS::Region}",
	"Partition": "${AWS::Partition}",
	"Bucket":    "${ArtifactBucket}",
}

var placeholderRE = regexp.MustCompile(`\$\{([A-Za-z:]+)\}`)

func (c *SetupContract) check() error {
	var bad []string
	walk := func(where, s string, allowBucket bool) {
		for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
			if _, ok := setupPlaceholders[m[1]]; !ok || (m[1] == "Bucket" && !allowBucket) {
				bad = append(bad, fmt.Sprintf("%s: placeholder ${%s} is not one of Prefix, Account, Region, Partition (Bucket only in policies)", where, m[1]))
			}
		}
	}
	walk("bucket.name", c.Bucket.Name, false)
	walk("trust_condition.value", c.TrustCondition.Value, false)
	if c.Tag.Key == "" || c.Tag.Value == "" || c.ServicePrincipal == "" || len(c.TrustActions) == 0 || c.DefaultPrefix == "" {
		bad = append(bad, "tag, service_principal, trust_actions and default_prefix are required")
	}
	if c.Bucket.ExpireAfterDays < 1 || c.Bucket.SSEAlgorithm == "" || c.Bucket.Env == "" || c.Bucket.LifecycleRuleID == "" {
		bad = append(bad, "bucket: sse_algorithm, env, lifecycle_rule_id and a positive expire_after_days are required")
	}
	ids := map[string]bool{}
	for _, r := range c.Roles {
		if ids[r.ID] || r.ID == "" || r.Env == "" || r.PolicyName == "" || len(r.Statements) == 0 || len(r.Needs) == 0 {
			bad = append(bad, fmt.Sprintf("role %q: a unique id, env, policy_name, statements and needs are required", r.ID))
		}
		ids[r.ID] = true
		walk("role "+r.ID+" name", r.Name, false)
		for _, st := range r.Statements {
			if st.Sid == "" || st.Why == "" || len(st.Actions) == 0 || len(st.Resources) == 0 {
				bad = append(bad, fmt.Sprintf("role %s statement %q: sid, why, actions and resources are required", r.ID, st.Sid))
			}
			for _, res := range st.Resources {
				walk("role "+r.ID+" statement "+st.Sid, res, true)
			}
		}
		for _, n := range r.Needs {
			walk("role "+r.ID+" need "+n.Action, n.Resource, true)
		}
	}
	if !ids["build"] || !ids["execution"] {
		bad = append(bad, "roles: build and execution are both required (the CLI reads them by id)")
	}
	if len(bad) > 0 {
		return fmt.Errorf("api/setup.yaml:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// cfnSub is s in CloudFormation's words: a Fn::Sub when it names a
// placeholder, the bare string when not (cfn-lint warns on a Sub of nothing).
func cfnSub(s string) any {
	if !placeholderRE.MatchString(s) {
		return s
	}
	return map[string]any{"Fn::Sub": placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		return setupPlaceholders[m[2:len(m)-1]]
	})}
}

func cfnList(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = cfnSub(s)
	}
	return out
}

// template is the CloudFormation template: the same bucket, roles, tag,
// trust and statements setup makes, with the env lines as outputs.
func (c *SetupContract) template() ([]byte, error) {
	tags := []any{map[string]any{"Key": c.Tag.Key, "Value": c.Tag.Value}}
	trust := map[string]any{
		"Version": "2012-10-17",
		"Statement": []any{map[string]any{
			"Effect":    "Allow",
			"Principal": map[string]any{"Service": c.ServicePrincipal},
			"Action":    c.TrustActions,
			"Condition": map[string]any{c.TrustCondition.Test: map[string]any{c.TrustCondition.Key: cfnSub(c.TrustCondition.Value)}},
		}},
	}
	resources := map[string]any{
		"ArtifactBucket": map[string]any{
			"Type":           "AWS::S3::Bucket",
			"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
			"Properties": map[string]any{
				"BucketName": cfnSub(c.Bucket.Name),
				"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
					map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": c.Bucket.SSEAlgorithm}},
				}},
				"PublicAccessBlockConfiguration": map[string]any{
					"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
				},
				"LifecycleConfiguration": map[string]any{"Rules": []any{map[string]any{
					"Id": c.Bucket.LifecycleRuleID, "Status": "Enabled", "ExpirationInDays": c.Bucket.ExpireAfterDays,
					"AbortIncompleteMultipartUpload": map[string]any{"DaysAfterInitiation": 1},
				}}},
				"Tags": tags,
			},
		},
	}
	outputs := map[string]any{
		"Bucket": map[string]any{"Description": "export " + c.Bucket.Env + "=<this>", "Value": map[string]any{"Ref": "ArtifactBucket"}},
	}
	for _, r := range c.Roles {
		var stmts []any
		for _, st := range r.Statements {
			stmts = append(stmts, map[string]any{"Sid": st.Sid, "Effect": "Allow", "Action": st.Actions, "Resource": cfnList(st.Resources)})
		}
		logical := goIdent(r.ID) + "Role"
		resources[logical] = map[string]any{
			"Type": "AWS::IAM::Role",
			"Properties": map[string]any{
				"RoleName":                 cfnSub(r.Name),
				"Description":              r.Doc,
				"AssumeRolePolicyDocument": trust,
				"Policies":                 []any{map[string]any{"PolicyName": r.PolicyName, "PolicyDocument": map[string]any{"Version": "2012-10-17", "Statement": stmts}}},
				"Tags":                     tags,
			},
		}
		outputs[logical+"Arn"] = map[string]any{"Description": "export " + r.Env + "=<this>", "Value": map[string]any{"Fn::GetAtt": []string{logical, "Arn"}}}
	}
	doc := map[string]any{
		"AWSTemplateFormatVersion": "2010-09-09",
		"Description":              "The artifact bucket, build role and execution role microvm needs on AWS; the same resources `microvm setup` makes (generated from api/setup.yaml).",
		"Parameters": map[string]any{"Prefix": map[string]any{
			"Type": "String", "Default": c.DefaultPrefix, "AllowedPattern": "^[a-z0-9][a-z0-9-]{0,30}$",
			"Description": "The names' prefix, as microvm setup --prefix.",
		}},
		"Resources": resources,
		"Outputs":   outputs,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

type setupView struct {
	C        *SetupContract
	RoleVars []string
}

func generateSetup(root string) ([]Output, error) {
	var c SetupContract
	if err := decodeStrict(root, "setup.yaml", &c); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	sort.SliceStable(c.Roles, func(i, j int) bool { return c.Roles[i].ID < c.Roles[j].ID })
	src, err := renderGo("setupapi", "setupapi.go.tmpl", setupView{C: &c})
	if err != nil {
		return nil, err
	}
	tmpl, err := c.template()
	if err != nil {
		return nil, err
	}
	return []Output{
		{Path: "gen/setupapi/setupapi.gen.go", Data: src},
		{Path: "docs/setup/microvm-setup.cfn.json", Data: tmpl},
	}, nil
}

func init() { register(generateSetup) }
