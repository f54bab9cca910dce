package setup_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

func options(t *testing.T) (*emulator.Server, setup.Options) {
	t.Helper()
	emu := emulator.New(emulator.Options{})
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	creds := credentials.NewStaticCredentialsProvider("a", "b", "")
	return emu, setup.Options{
		IAM:     iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: creds}),
		S3:      s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: creds, UsePathStyle: true}),
		Account: "123456789012", Region: "us-east-1", Prefix: "t",
	}
}

// Catches: a dry run that changes anything or under-reports what it would
// do; an Apply that writes what is already in place; and a Destroy that
// removes an inline policy it did not write (or the role holding one) or
// reports success while a role is left.
func TestApplyDryRunAndAnExactDestroy(t *testing.T) {
	ctx := context.Background()
	emu, o := options(t)
	dry := o
	dry.DryRun = true
	plan, err := setup.Apply(ctx, dry)
	if err != nil {
		t.Fatal(err)
	}
	if exists, _ := emu.Role("t-build"); exists {
		t.Fatal("a dry run made a role")
	}
	if _, err := o.S3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(plan.Names.Bucket)}); err == nil {
		t.Fatal("a dry run made the bucket")
	}
	res, err := setup.Apply(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != plan.Changed {
		t.Fatalf("the dry run planned %d changes, the run made %d", plan.Changed, res.Changed)
	}
	again, err := setup.Apply(ctx, o)
	if err != nil || again.Changed != 0 {
		t.Fatalf("a second Apply changed %d: %v", again.Changed, err)
	}
	for _, c := range again.Calls {
		if c.Mutating {
			t.Fatalf("a second Apply sent %s", c)
		}
	}

	// A policy the user put on setup's role is theirs: Destroy removes its
	// own, refuses to remove the role, and leaves theirs.
	theirs := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:ListBucket","Resource":"*"}]}`
	if _, err := o.IAM.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: aws.String("t-build"), PolicyName: aws.String("theirs"), PolicyDocument: aws.String(theirs)}); err != nil {
		t.Fatal(err)
	}
	_, err = setup.Destroy(ctx, o)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindPrecondition || !strings.Contains(err.Error(), "t-build") {
		t.Fatalf("Destroy over a user's policy: %v", err)
	}
	if exists, policies := emu.Role("t-build"); !exists || len(policies) != 1 || policies[0] != "theirs" {
		t.Fatalf("the role after Destroy: %v %v", exists, policies)
	}
	if _, err := o.IAM.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String("t-build"), PolicyName: aws.String("theirs")}); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Destroy(ctx, o); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t-build", "t-execution"} {
		if exists, _ := emu.Role(name); exists {
			t.Fatalf("Destroy left %s", name)
		}
	}
	if _, err := o.S3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(res.Names.Bucket)}); err == nil {
		t.Fatal("Destroy left the bucket")
	}
}
