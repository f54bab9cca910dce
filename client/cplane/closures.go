package cplane

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// refuse is a local refusal: InvalidArg, naming the finding that measured
// why the platform would answer the request badly.
func refuse(finding taxonomy.FindingID, format string, args ...any) *client.Error {
	return client.Errorf(taxonomy.KindInvalidArg, finding, format, args...)
}

// ---- runHookPayload -------------------------------------------------------

// RunHookPayload is the string RunMicrovm delivers to the guest's run hook:
// agentd's bootstrap token and the launch environment, serialized once. The
// only way to make one is NewRunHookPayload, which enforces the ceiling.
type RunHookPayload struct{ s string }

// NewRunHookPayload serializes the agent token and launch env and refuses the
// result when it exceeds the platform's ceiling, counted in UTF-8 bytes over
// the whole string (the env included), 4096 inclusive. The refusal names the
// byte count, the ceiling and how much of it the env takes, because the env
// is the part a caller can shrink.
func NewRunHookPayload(agentToken string, env map[string]string) (RunHookPayload, error) {
	if agentToken == "" {
		return RunHookPayload{}, refuse(taxonomy.FindingRunHookPayloadWrapped, "runHookPayload needs an agent token; agentd refuses a bootstrap without one")
	}
	full, err := json.Marshal(protocol.RunHookPayload{AgentToken: agentToken, Env: env})
	if err != nil {
		return RunHookPayload{}, client.Errorf(taxonomy.KindUnexpected, "", "serializing runHookPayload: %w", err)
	}
	if len(full) > taxonomy.MaxRunHookPayloadBytes {
		bare, _ := json.Marshal(protocol.RunHookPayload{AgentToken: agentToken})
		envShare := len(full) - len(bare)
		return RunHookPayload{}, refuse(taxonomy.FindingRunHookPayloadCeiling,
			"runHookPayload is %d bytes, over the %d-byte ceiling (inclusive, UTF-8, the whole serialized string); the launch env accounts for %d of them across %d variables, so trim %d bytes from it (the model's prose says %d, but the service refuses above %d)",
			len(full), taxonomy.MaxRunHookPayloadBytes, envShare, len(env), len(full)-taxonomy.MaxRunHookPayloadBytes,
			taxonomy.DocumentedRunHookPayloadBytes, taxonomy.MaxRunHookPayloadBytes)
	}
	return RunHookPayload{s: string(full)}, nil
}

// Payload is the serialized string RunMicrovmInput.RunHookPayload carries.
// It holds the agent token: send it, never log or persist it.
func (p RunHookPayload) Payload() string { return p.s }

// Len is the payload's size in bytes.
func (p RunHookPayload) Len() int { return len(p.s) }

// IsZero reports whether p was never built.
func (p RunHookPayload) IsZero() bool { return p.s == "" }

// String redacts the token; the payload is a secret.
func (p RunHookPayload) String() string { return fmt.Sprintf("RunHookPayload(%d bytes)", len(p.s)) }

// GoString redacts the token under %#v too.
func (p RunHookPayload) GoString() string { return p.String() }

// LogValue redacts the token in structured logs.
func (p RunHookPayload) LogValue() slog.Value { return slog.StringValue(p.String()) }

// ---- network connectors ---------------------------------------------------

// Connectors are the network intents of a launch. A launch renders them as
// the full connector ARNs for its region (lambdamicrovms.ConnectorARN), never
// bare names: the service refuses "ALL_INGRESS" and wants the ARN. There is deliberately no shell
// intent: this client never requests SHELL_INGRESS.
type Connectors struct {
	// Ingress lets the endpoint reach the guest; without it nothing can.
	Ingress bool
	// InternetEgress lets the guest reach the internet; omitted, the VM has
	// no outbound network.
	InternetEgress bool
}

// IdlePolicy is the launch's idle behaviour. AutoResume is a real platform
// feature, so it is a field rather than a hard-coded false.
type IdlePolicy struct {
	MaxIdle, SuspendedFor time.Duration
	AutoResume            bool
}

// ---- image references ------------------------------------------------------

var imageNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^" + taxonomy.ImageNamePattern + "$") })

// colonImageARN is the only image ARN spelling the service accepts.
var colonImageARN = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:(\d{12}|aws):microvm-image:[a-zA-Z0-9-_]+$`)

// ImageRef names an image: by name, or by its ARN in the colon form.
type ImageRef struct{ id string }

// ParseImageRef accepts an image name or a colon-form image ARN. The slash
// form (…:microvm-image/<name>) is refused: the service answers it with an
// AccessDeniedException about a resource that exists and is permitted, which
// sends a reader to widen an IAM policy that was never too narrow.
func ParseImageRef(s string) (ImageRef, error) {
	switch {
	case strings.Contains(s, ":microvm-image/"):
		fixed := strings.Replace(s, ":microvm-image/", ":microvm-image:", 1)
		return ImageRef{}, refuse(taxonomy.FindingImageARNColon,
			"image ARN %q uses a slash before the name; the service answers that form with a misleading AccessDeniedException. Use %q", s, fixed)
	case strings.HasPrefix(s, "arn:"):
		if !colonImageARN.MatchString(s) {
			return ImageRef{}, refuse(taxonomy.FindingImageARNColon, "%q is not an image ARN of the form arn:aws:lambda:<region>:<account>:microvm-image:<name>", s)
		}
	case s == "" || len(s) > taxonomy.MaxImageNameLen || !imageNameRE().MatchString(s):
		return ImageRef{}, refuse(taxonomy.FindingImageARNColon, "%q is neither an image name (1..%d of [a-zA-Z0-9-_]) nor a colon-form image ARN", s, taxonomy.MaxImageNameLen)
	}
	return ImageRef{id: s}, nil
}

// String is the identifier sent on the wire.
func (r ImageRef) String() string { return r.id }

// IsARN reports whether r is an ARN rather than a bare name.
func (r ImageRef) IsARN() bool { return strings.HasPrefix(r.id, "arn:") }

// Name is the image's name: r itself, or the part of its ARN after
// ":microvm-image:".
func (r ImageRef) Name() string {
	if _, n, ok := strings.Cut(r.id, ":microvm-image:"); ok && r.IsARN() {
		return n
	}
	return r.id
}

// ImageName is the name s (an image's name or colon-form ARN) refers to, or
// "" when ParseImageRef refuses s. Every caller that needs an image's name
// from an identifier reads it here, so the ARN's form is parsed in one place.
func ImageName(s string) string {
	r, err := ParseImageRef(s)
	if err != nil {
		return ""
	}
	return r.Name()
}

// ---- image versions --------------------------------------------------------

// CheckImageVersion validates an image version string: non-empty, at most
// 2048 bytes, no whitespace. Versions are otherwise free text ("1.0" on a
// custom image, "1" on the managed base), so nothing more is assumed.
func CheckImageVersion(v string) error {
	if v == "" {
		return refuse(taxonomy.FindingImageVersionForm, "image version is empty")
	}
	if len(v) > taxonomy.MaxImageVersionLen {
		return refuse(taxonomy.FindingImageVersionForm, "image version is %d bytes, over the %d-byte limit", len(v), taxonomy.MaxImageVersionLen)
	}
	if i := strings.IndexFunc(v, unicode.IsSpace); i >= 0 {
		return refuse(taxonomy.FindingImageVersionForm, "image version %q contains whitespace at byte %d", v, i)
	}
	return nil
}

// ---- managed base versions -------------------------------------------------

// CheckManagedBaseVersion refuses a baseImageVersion that is not spelled as
// the managed base's own listing spells its versions: bare integers ("1",
// "0"). The read-back spells a pinned base "1.0", and that spelling cannot
// be sent back (finding managed-base-versions; base-image-version-normalised
// for the read-back). A refusal here saves the artifact upload the
// service's ValidationException would cost.
func CheckManagedBaseVersion(v string) error {
	if err := CheckImageVersion(v); err != nil {
		return err
	}
	for _, r := range v {
		if r < '0' || r > '9' {
			hint := ""
			if whole, ok := strings.CutSuffix(v, ".0"); ok && whole != "" && strings.Trim(whole, "0123456789") == "" {
				hint = fmt.Sprintf(" (%q is how GetMicrovmImageVersion reads a pin of %q back; send %q)", v, whole, whole)
			}
			return refuse(taxonomy.FindingManagedBaseVersions, "base image version %q is not a bare integer, which is how the managed base's versions are spelled (ListManagedMicrovmImageVersions: \"1\", \"0\")%s", v, hint)
		}
	}
	return nil
}
