package checkpoint

import (
	"fmt"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Reason says why a checkpoint was refused.
type Reason string

const (
	// ReasonTruncated: the object is shorter than its manifest says.
	ReasonTruncated Reason = "truncated"
	// ReasonCorrupted: the object's length or sha256 differs from its
	// manifest's.
	ReasonCorrupted Reason = "corrupted"
	// ReasonForeign: the manifest or the object is not a checkpoint this
	// client wrote (not zstd, not a tar, members the manifest does not
	// count, an unknown manifest format).
	ReasonForeign Reason = "foreign"
	// ReasonOtherVersion: the checkpoint was taken on another image or
	// image version than the restore asked for.
	ReasonOtherVersion Reason = "other-version"
)

// RefusalError is the cause inside a refused checkpoint's *client.Error
// (kind CheckpointRefused, finding no-user-snapshot): errors.As finds it.
type RefusalError struct {
	Reason Reason
	Detail string
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("checkpoint refused (%s): %s", e.Reason, e.Detail)
}

// refusef is a refusal as the client error every caller sees.
func refusef(r Reason, format string, args ...any) *client.Error {
	re := &RefusalError{Reason: r, Detail: fmt.Sprintf(format, args...)}
	return client.Errorf(taxonomy.KindCheckpointRefused, taxonomy.FindingNoUserSnapshot, "%s; no file of it was laid", re.Error()).WithCause(re)
}
