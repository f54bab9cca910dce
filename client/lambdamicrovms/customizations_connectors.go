package lambdamicrovms

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. Network connectors are named by full ARN in the request's
// region; the service refuses a bare name such as "ALL_INGRESS" (finding
// network-connectors-are-arns). ConnectorARN builds the ARN.

func init() { trapChecks = append(trapChecks, checkConnectors) }

// ConnectorARN is the ARN of the AWS-managed network connector name
// (ALL_INGRESS, HTTP_INGRESS, INTERNET_EGRESS, ...) in region.
func ConnectorARN(region, name string) string {
	return fmt.Sprintf("arn:%s:lambda:%s:aws:network-connector:aws-network-connector:%s", PartitionID(region), region, name)
}

func checkConnectors(opID string, input reflect.Value) error {
	for _, name := range []string{"IngressNetworkConnectors", "EgressNetworkConnectors"} {
		f := input.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Slice {
			continue
		}
		for i := 0; i < f.Len(); i++ {
			c, _ := f.Index(i).Interface().(string)
			if strings.HasPrefix(c, "arn:") {
				continue
			}
			return &RefusalError{
				Finding: taxonomy.FindingNetworkConnectorsAreArns,
				Field:   fmt.Sprintf("%sInput.%s[%d]", opID, name, i),
				Reason:  fmt.Sprintf("connector %q is a bare name; the service wants the full ARN (ConnectorARN(region, %q))", c, c),
			}
		}
	}
	return nil
}
