package schema

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Catches: a CloudFormation template that cfn-lint (make lint-cfn) would
// not pass, and a lint step that would not notice a wrong property: a
// planted misspelt bucket property and a role without its trust policy
// must each fail it.
func TestSetupTemplateUnderCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		// make lint-cfn looks in pyenv's shims too.
		home, _ := os.UserHomeDir()
		if _, serr := os.Stat(filepath.Join(home, ".pyenv", "shims", "cfn-lint")); serr == nil {
			lint, err = filepath.Join(home, ".pyenv", "shims", "cfn-lint"), nil
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("cfn-lint is not installed; make lint-cfn needs it")
		}
		t.Skip("cfn-lint is not installed")
	}
	outs, err := generateSetup("..")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl []byte
	for _, o := range outs {
		if strings.HasSuffix(o.Path, ".cfn.json") {
			tmpl = o.Data
		}
	}
	run := func(name string, data []byte) (bool, string) {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(lint, "--non-zero-exit-code", "warning", path).CombinedOutput()
		return err == nil, string(out)
	}
	if ok, out := run("good.json", tmpl); !ok {
		t.Fatalf("the generated template fails cfn-lint:\n%s", out)
	}
	for what, bad := range map[string]string{
		"a misspelt bucket property": strings.Replace(string(tmpl), `"BucketEncryption"`, `"BucketEncryptions"`, 1),
		"a role without its trust":   strings.Replace(string(tmpl), `"AssumeRolePolicyDocument"`, `"AssumeRolePolicy"`, 1),
	} {
		if ok, _ := run("bad.json", []byte(bad)); ok {
			t.Errorf("cfn-lint passed %s", what)
		}
	}
}

// Catches: a declaration the generator should refuse being generated: a
// placeholder it does not know, ${Bucket} in the bucket's own name, a role
// without the needs doctor simulates.
func TestSetupContractRefusals(t *testing.T) {
	var c SetupContract
	if err := decodeStrict("..", "setup.yaml", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	for what, edit := range map[string]func(c *SetupContract){
		"unknown placeholder":      func(c *SetupContract) { c.Roles[0].Statements[0].Resources[0] = "arn:${Partitoin}:s3:::x" },
		"bucket in its own name":   func(c *SetupContract) { c.Bucket.Name = "${Bucket}-x" },
		"a role without its needs": func(c *SetupContract) { c.Roles[1].Needs = nil },
		"no tag":                   func(c *SetupContract) { c.Tag.Key = "" },
	} {
		var d SetupContract
		_ = decodeStrict("..", "setup.yaml", &d)
		edit(&d)
		if d.check() == nil {
			t.Errorf("%s was accepted", what)
		}
	}
}
