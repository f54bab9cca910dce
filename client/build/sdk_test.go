package build

import (
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Carried over from client/control. Catches additionalOsCapabilities sent
// without the repair intent, a size class not reaching the wire, egress
// without being asked, the base or the connector in another region's ARN,
// and a hook port outside 1..65535 sent.
func TestCreateInput(t *testing.T) {
	s := Spec{BuildRoleARN: "arn:aws:iam::123456789012:role/b", Port: 9000}
	plain, err := createInput("eu-west-1", "p", s, "s3://b/p.zip", "/aws/lambda-microvms/p")
	if err != nil {
		t.Fatal(err)
	}
	if plain.AdditionalOsCapabilities != nil || plain.Resources != nil || plain.EgressNetworkConnectors != nil {
		t.Fatalf("capabilities %v / resources %v / egress %v without being asked", plain.AdditionalOsCapabilities, plain.Resources, plain.EgressNetworkConnectors)
	}
	if *plain.BaseImageArn != "arn:aws:lambda:eu-west-1:aws:microvm-image:"+taxonomy.ManagedBaseImage || *plain.Hooks.Port != 9000 ||
		plain.Logging.(*types.LoggingMemberCloudWatch).Value.LogGroup == nil {
		t.Fatalf("base %s, hooks %+v, logging %+v", *plain.BaseImageArn, plain.Hooks, plain.Logging)
	}
	s.RepairIdentity, s.InternetEgress = true, true
	s.Size, _ = client.SizeClassFromBaseline(512)
	rep, err := createInput("eu-west-1", "r", s, "s3://b/r.zip", "/aws/lambda-microvms/r")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.AdditionalOsCapabilities) != 1 || rep.AdditionalOsCapabilities[0] != types.CapabilityAll {
		t.Fatalf("repair identity should send [ALL], got %v", rep.AdditionalOsCapabilities)
	}
	if len(rep.Resources) != 1 || *rep.Resources[0].MinimumMemoryInMiB != 512 {
		t.Fatalf("size class not sent: %v", rep.Resources)
	}
	if len(rep.EgressNetworkConnectors) != 1 || rep.EgressNetworkConnectors[0] != "arn:aws:lambda:eu-west-1:aws:network-connector:aws-network-connector:INTERNET_EGRESS" {
		t.Fatalf("egress %v", rep.EgressNetworkConnectors)
	}
	s.Port = 65536
	if _, err := createInput("eu-west-1", "x", s, "s3://b/x.zip", "/g"); client.KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("port 65536: %v", err)
	}
}
