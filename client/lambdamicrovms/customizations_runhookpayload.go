package lambdamicrovms

import (
	"fmt"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Hand-written. The model's @length on runHookPayload counts characters and
// its prose says 16,384 bytes; the service refuses a payload over 4096 bytes
// of UTF-8, the whole serialized string, inclusive (finding
// run-hook-payload-ceiling). A multi-byte payload under the model's length can
// still be over the measured ceiling, so the byte count is checked here.

func checkRunHookPayload(opID, field string, payload *string) error {
	if payload == nil || len(*payload) <= taxonomy.MaxRunHookPayloadBytes {
		return nil
	}
	s := *payload
	return &RefusalError{
		Finding: taxonomy.FindingRunHookPayloadCeiling,
		Field:   opID + "Input." + field,
		Reason: fmt.Sprintf("%d bytes of UTF-8, over the %d-byte ceiling the service enforces (the model's prose says %d); trim %d bytes",
			len(s), taxonomy.MaxRunHookPayloadBytes, taxonomy.DocumentedRunHookPayloadBytes, len(s)-taxonomy.MaxRunHookPayloadBytes),
	}
}
