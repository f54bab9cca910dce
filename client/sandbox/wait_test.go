package sandbox

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Carried over from client/control's waiter tests, against WaitMicrovm.

// scripted is a stand-in control plane on 127.0.0.1 answering GetMicrovm for
// one MicroVM with the next state of a script, repeating the last one.
func scripted(t *testing.T, states ...types.MicrovmState) *lambdamicrovms.Client {
	t.Helper()
	var mu sync.Mutex
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		st := states[min(polls, len(states)-1)]
		polls++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"microvmId":"mvm-1","state":%q,"endpoint":"mvm-1.example","imageArn":"arn:aws:lambda:us-east-1:123456789012:microvm-image:i","imageVersion":"1","maximumDurationInSeconds":3600,"startedAt":1.7e9}`, st)
	}))
	t.Cleanup(srv.Close)
	c, err := cplane.New(context.Background(), cplane.Options{Region: client.USEast1, Endpoint: srv.URL, Credentials: creds, MaxAttempts: 1, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Catches WaitMicrovm for SUSPENDED waiting through a dead state, or failing
// on the SUSPENDING it passes through on the way.
func TestWaitSuspendedPassesSuspendingAndFailsOnDead(t *testing.T) {
	ctx := context.Background()
	got, err := WaitMicrovm(ctx, scripted(t, types.MicrovmStateRunning, types.MicrovmStateSuspending, types.MicrovmStateSuspended), "mvm-1", types.MicrovmStateSuspended, fast)
	if err != nil || got.State != types.MicrovmStateSuspended {
		t.Fatalf("WaitSuspended: %v %v", got, err)
	}
	_, err = WaitMicrovm(ctx, scripted(t, types.MicrovmStateSuspending, types.MicrovmStateTerminated), "mvm-1", types.MicrovmStateSuspended, fast)
	if k := client.KindOf(err); k != taxonomy.KindPlatform {
		t.Fatalf("a VM that died while SUSPENDED was awaited: %v (kind %s), want Platform", err, k)
	}
}

// Catches a wait with no bound: a context without a deadline still ends at
// Timeout, as Timeout.
func TestWaitEndsAtItsTimeout(t *testing.T) {
	f := newFixture(t, emulator.Options{Launches: func(string) emulator.LaunchPlan { return emulator.LaunchPlan{Steps: 1 << 30} }})
	run, err := f.cp.RunMicrovm(context.Background(), &lambdamicrovms.RunMicrovmInput{ImageIdentifier: aws.String(f.emu.AddImage("slow"))})
	if err != nil {
		t.Fatal(err)
	}
	o := fast
	o.Timeout = 50 * time.Millisecond
	_, err = WaitMicrovm(context.Background(), f.cp, aws.ToString(run.MicrovmId), types.MicrovmStateRunning, o)
	if k := client.KindOf(err); k != taxonomy.KindTimeout {
		t.Fatalf("got %v (kind %s), want Timeout", err, k)
	}
}

// Catches anyone adding a call to CreateMicrovmShellAuthToken outside
// OpenShell (shell.go, which mints only for a MicroVM already listing
// SHELL_INGRESS) or a SHELL_INGRESS connector literal to the library's or the
// CLI's non-test code: the client never requests that connector at launch.
func TestNeverCallsTheShellOperation(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "../build", "../cplane", "../../cmd/microvm", "../../emulator/embedded"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("only %d files found to scan", len(files))
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if (strings.Contains(x.Sel.Name, "ShellAuth") || x.Sel.Name == "ShellIngressConnector") && filepath.Base(f) != "shell.go" {
					t.Errorf("%s refers to %s", fset.Position(x.Pos()), x.Sel.Name)
				}
			case *ast.BasicLit:
				// The connector's name as a value (prose naming it, in help
				// and messages, requests nothing).
				if v, err := strconv.Unquote(x.Value); err == nil && (v == "SHELL_INGRESS" || strings.HasSuffix(v, ":SHELL_INGRESS")) {
					t.Errorf("%s requests SHELL_INGRESS", fset.Position(x.Pos()))
				}
			}
			return true
		})
	}
}
