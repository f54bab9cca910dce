package lambdamicrovms

import (
	"fmt"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. The model bounds expirationInMinutes only below; a proxy
// token is valid for at most 60 minutes (finding endpoint-auth), so a longer
// request is refused here rather than by the service.

func checkTokenExpiry(opID, field string, minutes *int32) error {
	if minutes == nil || *minutes <= taxonomy.MaxAuthTokenMinutes {
		return nil
	}
	n := *minutes
	return &RefusalError{
		Finding: taxonomy.FindingEndpointAuth,
		Field:   opID + "Input." + field,
		Reason:  fmt.Sprintf("%d minutes is over the %d-minute ceiling of an endpoint token", n, taxonomy.MaxAuthTokenMinutes),
	}
}
