package setup

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/setupapi"
)

// EnvFile is the state directory's file of setup's env lines, which later
// commands (and the engine's builds) read for what nothing else set.
const EnvFile = "setup.env"

// EndpointKey is the comment line naming the control-plane endpoint setup
// ran against ("" for AWS's own): the file applies only to callers bound for
// the same one, so an account's names never reach an emulator or the
// reverse.
const EndpointKey = "#endpoint"

// Infra are the account names AWS builds and launches need.
type Infra struct {
	Bucket, BuildRoleARN, ExecutionRoleARN string
}

// readEnvFile reads the state directory's setup.env (dir, else
// $MICROVM_STATE_DIR, else the default), empty when there is none.
func readEnvFile(dir string, getenv func(string) string) map[string]string {
	if dir == "" && getenv != nil {
		dir = getenv("MICROVM_STATE_DIR")
	}
	if dir == "" {
		d, err := ledger.DefaultDir()
		if err != nil {
			return nil
		}
		dir = d
	}
	f, err := os.Open(filepath.Join(dir, EnvFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && (k == EndpointKey || !strings.HasPrefix(k, "#")) {
			out[k] = v
		}
	}
	return out
}

// Filled is i with what it leaves unset filled from the state directory's
// setup.env (dir, else $MICROVM_STATE_DIR, else the default), when setup ran
// against endpoint and region.
func (i Infra) Filled(dir string, getenv func(string) string, endpoint, region string) Infra {
	env := readEnvFile(dir, getenv)
	if _, ok := env[EndpointKey]; !ok || env[EndpointKey] != endpoint || env["AWS_REGION"] != region {
		return i
	}
	fill := func(v *string, name string) {
		if *v == "" {
			*v = env[name]
		}
	}
	fill(&i.Bucket, setupapi.BucketEnv)
	for _, r := range setupapi.Roles {
		switch r.ID {
		case setupapi.RoleBuild:
			fill(&i.BuildRoleARN, r.Env)
		case setupapi.RoleExecution:
			fill(&i.ExecutionRoleARN, r.Env)
		}
	}
	return i
}
