package lambdamicrovms

import (
	"fmt"
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. Network connectors are named by full ARN in the request's
// region; the service refuses a bare name such as "ALL_INGRESS" (finding
// network-connectors-are-arns). ConnectorARN builds the ARN.

// ConnectorARN is the ARN of the AWS-managed network connector name
// (ALL_INGRESS, HTTP_INGRESS, INTERNET_EGRESS, ...) in region.
func ConnectorARN(region, name string) string {
	return fmt.Sprintf("arn:%s:lambda:%s:aws:network-connector:aws-network-connector:%s", PartitionID(region), region, name)
}

func checkConnectors(opID, field string, connectors []string) error {
	for i, c := range connectors {
		if strings.HasPrefix(c, "arn:") {
			continue
		}
		return &RefusalError{
			Finding: taxonomy.FindingNetworkConnectorsAreArns,
			Field:   fmt.Sprintf("%sInput.%s[%d]", opID, field, i),
			Reason:  fmt.Sprintf("connector %q is a bare name; the service wants the full ARN (ConnectorARN(region, %q))", c, c),
		}
	}
	return nil
}
