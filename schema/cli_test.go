package schema

import (
	"strings"
	"testing"
)

// Wrong edit caught: an object in api/cli.yaml that lists its keys inline.
// gen/cliapi can give such an object no named type, so cmd/microvm would go
// back to filling a map or a private struct that repeats the keys.
func TestCLIInlineObjectKeysAreRefused(t *testing.T) {
	root := plantedRoot(t, "cli.yaml",
		"    - {name: alternateResponse, type: object, nullable: true, ref: manifestAlternate}\n",
		"    - {name: alternateResponse, type: object, nullable: true, keys: [{name: when, type: string}]}\n")
	_, err := LoadCLIContract(root)
	if err == nil || !strings.Contains(err.Error(), "declare them as a shape") {
		t.Fatalf("inline keys on manifestCommand.alternateResponse: %v, want a refusal naming shapes", err)
	}
}

// Wrong edit caught: goType forgetting refs, so a ref'd key is generated as
// any or []any (the state before issue 16) and commands fill it untyped; or
// an optional key generated without a pointer, so a ledger record's
// "closed": false is dropped by omitempty.
func TestCLIRefsAndOptionalKeysAreTyped(t *testing.T) {
	c, err := LoadCLIContract("..")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]CLIKey{}
	for _, r := range c.Responses {
		keys[r.Type] = r.Keys
	}
	for name, ks := range c.Shapes {
		keys["shape "+name] = ks
	}
	refs := 0
	for where, ks := range keys {
		for _, k := range ks {
			got := goType(k)
			if k.Ref != "" && !builtinShapes[k.Ref] {
				refs++
				if !strings.HasSuffix(got, shapeIdent(k.Ref)) || strings.Contains(got, "any") {
					t.Errorf("%s.%s refs %s but is generated as %s", where, k.Name, k.Ref, got)
				}
			}
			if k.Optional && !strings.HasPrefix(got, "*") {
				t.Errorf("%s.%s is optional but generated as %s: omitempty would drop its zero", where, k.Name, got)
			}
		}
	}
	if refs < 10 {
		t.Fatalf("only %d refs seen; the walk is not reading api/cli.yaml", refs)
	}
	tax, err := LoadTaxonomy("..")
	if err != nil {
		t.Fatal(err)
	}
	src, err := cliGo(c, tax)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Checks []DoctorCheck", "Runs []Run", "Report CostReport", "Comparison *CostComparison", "Steps *[]RunStep", "AlternateResponse *ManifestAlternate"} {
		if !strings.Contains(strings.Join(strings.Fields(string(src)), " "), want) {
			t.Errorf("gen/cliapi lacks %q", want)
		}
	}
}

// Wrong edit caught: a JSON key turned into a field name that breaks Go's
// initialisms (SupportsJson, TotalUsd, Ok, Image_arn).
func TestCLIFieldNamesKeepInitialisms(t *testing.T) {
	for in, want := range map[string]string{
		"supportsJson":   "SupportsJSON",
		"totalUsd":       "TotalUSD",
		"usd":            "USD",
		"ok":             "OK",
		"execId":         "ExecID",
		"cpuUsedPercent": "CPUUsedPercent",
		"image_arn":      "ImageARN",
		"artifact_uri":   "ArtifactURI",
		"microvm_id":     "MicrovmID",
		"created_at":     "CreatedAt",
		"eof":            "EOF",
		"identityOk":     "IdentityOK",
		"okay":           "Okay", // a word that merely starts like an initialism
		"load15":         "Load15",
	} {
		if got := goFieldName(in); got != want {
			t.Errorf("goFieldName(%q) = %q, want %q", in, got, want)
		}
	}
}
