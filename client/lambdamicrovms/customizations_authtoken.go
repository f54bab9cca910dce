package lambdamicrovms

import (
	"fmt"
	"reflect"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. The model bounds expirationInMinutes only below; a proxy
// token is valid for at most 60 minutes (finding endpoint-auth), so a longer
// request is refused here rather than by the service.

func init() { trapChecks = append(trapChecks, checkTokenExpiry) }

func checkTokenExpiry(opID string, input reflect.Value) error {
	f := input.FieldByName("ExpirationInMinutes")
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() {
		return nil
	}
	n := f.Elem().Int()
	if n <= taxonomy.MaxAuthTokenMinutes {
		return nil
	}
	return &RefusalError{
		Finding: taxonomy.FindingEndpointAuth,
		Field:   opID + "Input.ExpirationInMinutes",
		Reason:  fmt.Sprintf("%d minutes is over the %d-minute ceiling of an endpoint token", n, taxonomy.MaxAuthTokenMinutes),
	}
}
