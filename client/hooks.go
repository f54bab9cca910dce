package client

import (
	"strconv"

	"github.com/microvms/microvms/gen/taxonomy"
)

// The two hook families have ceilings 60x apart: run, resume, suspend and
// terminate wait on a daemon that is already booted (1..60 s); ready and
// validate are image-build hooks that wait on a Dockerfile (1..3600 s). They
// are two types with differently named fields, so neither converts to the
// other: a build-sized number in a run-hook field is a compile error, not a
// launch that fails after the artifact upload.

// hookTimeoutFinding is where the two hook-timeout ceilings are recorded.
const hookTimeoutFinding = taxonomy.FindingHookTimeoutCeilings

// RunHookTimeout is a timeout for the run, resume, suspend or terminate hook.
type RunHookTimeout struct{ runSec uint8 }

// BuildHookTimeout is a timeout for the ready or validate image-build hook.
type BuildHookTimeout struct{ buildSec uint16 }

// NewRunHookTimeout accepts 1..taxonomy.MaxRunHookTimeoutSec seconds.
func NewRunHookTimeout(sec int) (RunHookTimeout, error) {
	if sec >= 1 && sec <= taxonomy.MaxRunHookTimeoutSec {
		return RunHookTimeout{runSec: uint8(sec)}, nil
	}
	return RunHookTimeout{}, hookTimeoutRefusal("run-time (run, resume, suspend, terminate)", sec,
		taxonomy.MaxRunHookTimeoutSec, "build-time", taxonomy.MaxBuildHookTimeoutSec)
}

// NewBuildHookTimeout accepts 1..taxonomy.MaxBuildHookTimeoutSec seconds.
func NewBuildHookTimeout(sec int) (BuildHookTimeout, error) {
	if sec >= 1 && sec <= taxonomy.MaxBuildHookTimeoutSec {
		return BuildHookTimeout{buildSec: uint16(sec)}, nil
	}
	return BuildHookTimeout{}, hookTimeoutRefusal("build-time (ready, validate)", sec,
		taxonomy.MaxBuildHookTimeoutSec, "run-time", taxonomy.MaxRunHookTimeoutSec)
}

func hookTimeoutRefusal(family string, sec, ceiling int, other string, otherCeiling int) *Error {
	return Errorf(taxonomy.KindInvalidArg, hookTimeoutFinding,
		"%s hook timeout of %ds is outside 1..%d (service model %s); the %s hooks cap at %ds instead, so a number chosen for one family is not valid for the other",
		family, sec, ceiling, taxonomy.ModelAPIVersion, other, otherCeiling)
}

// Seconds is the value for the wire field, the only way out of the type.
func (t RunHookTimeout) Seconds() int { return int(t.runSec) }

// Seconds is the value for the wire field, the only way out of the type.
func (t BuildHookTimeout) Seconds() int { return int(t.buildSec) }

// IsZero reports whether t was never set (the platform default applies).
func (t RunHookTimeout) IsZero() bool { return t.runSec == 0 }

// IsZero reports whether t was never set (the platform default applies).
func (t BuildHookTimeout) IsZero() bool { return t.buildSec == 0 }

func (t RunHookTimeout) String() string   { return strconv.Itoa(int(t.runSec)) + "s" }
func (t BuildHookTimeout) String() string { return strconv.Itoa(int(t.buildSec)) + "s" }
