package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/engineapi"
)

// surface is the one list the packages are held to: every exported method
// of the Go library's sandbox types, and the engine op that gives it to
// Python and TypeScript, or "go-only: <reason>". A method added to one of
// these types without a row here fails TestSurfaceMatchesTheGoLibrary; an
// op without its Python or TypeScript caller fails TestEveryOpHasItsCallers.
var surface = map[string]string{
	// client/sandbox.Sandbox
	"Sandbox.ID":               "op:info",
	"Sandbox.Lifecycle":        "op:info",
	"Sandbox.AgentToken":       "op:info",
	"Sandbox.Endpoint":         "op:info",
	"Sandbox.TokenInstalled":   "go-only: the launch's bookkeeping; an engine sandbox's token is always installed before create answers",
	"Sandbox.ImageExists":      "go-only: teardown bookkeeping; terminate reports what it deleted",
	"Sandbox.WasTerminated":    "op:info",
	"Sandbox.BootstrapCount":   "go-only: a test hook counting token installs",
	"Sandbox.SuspendedWindow":  "go-only: the idle policy's window as the library computed it; create's suspendedSec sets it",
	"Sandbox.Session":          "go-only: the raw HTTP session; every call it offers is an op below",
	"Sandbox.Suspend":          "op:suspend",
	"Sandbox.MaxIdle":          "op:info",
	"Sandbox.Deadline":         "op:info",
	"Sandbox.KeepAwake":        "op:keepalive",
	"Sandbox.Network":          "op:network_show",
	"Sandbox.SetNetworkPolicy": "op:network_set",
	"Sandbox.Shell":            "go-only: an interactive terminal (a raw byte stream both ways, no exit status) fits neither a request/reply op nor a tool call; the packages run commands with run, stream and start(pty=...), and `microvm shell` is the CLI's",
	"Sandbox.Resume":           "op:resume",
	"Sandbox.Run":              "op:run",
	"Sandbox.Terminate":        "op:terminate",
	"Sandbox.URL":              "op:url",
	"Sandbox.Usage":            "op:cost",
	"Sandbox.Cost":             "op:cost",
	"Sandbox.ReadFile":         "op:read",
	"Sandbox.WriteFile":        "op:write",
	"Sandbox.UploadDir":        "op:upload_dir",
	"Sandbox.DownloadDir":      "op:download_dir",
	"Sandbox.String":           "go-only: fmt.Stringer",
	"Sandbox.GoString":         "go-only: fmt.GoStringer",
	// client/sandbox.Handle: a MicroVM by id
	"Handle.ID":               "op:attach",
	"Handle.Status":           "op:info",
	"Handle.Suspend":          "op:suspend",
	"Handle.Resume":           "op:resume",
	"Handle.Terminate":        "op:terminate",
	"Handle.Await":            "go-only: waiting for a state without holding the sandbox; suspend/resume/create wait themselves",
	"Handle.Attach":           "op:attach",
	"Handle.Cost":             "op:cost",
	"Handle.Network":          "op:network_show",
	"Handle.SetNetworkPolicy": "op:network_set",
	// client/sandbox.Pool: an engine holding a pool; members are attached
	"Pool.Ready":     "op:pool_wait_ready",
	"Pool.WaitReady": "op:pool_wait_ready",
	"Pool.Acquire":   "op:pool_acquire",
	"Pool.Release":   "op:pool_release",
	"Pool.Close":     "op:pool_close",
	"Pool.Cost":      "op:pool_cost",
	// client.Session: the agentd calls
	"Session.Exec":             "op:poll",
	"Session.Start":            "op:start",
	"Session.StartStream":      "op:stream",
	"Session.Spawn":            "op:start",
	"Session.Run":              "op:run",
	"Session.Execs":            "op:execs",
	"Session.Metrics":          "op:metrics",
	"Session.Health":           "op:health",
	"Session.Stat":             "op:stat",
	"Session.ListPage":         "op:list",
	"Session.List":             "op:list",
	"Session.Mkdir":            "op:mkdir",
	"Session.Move":             "op:move",
	"Session.Remove":           "op:remove",
	"Session.Watch":            "op:watch",
	"Session.OpenFile":         "op:read",
	"Session.ReadFile":         "op:read",
	"Session.Download":         "op:read",
	"Session.KeepAwakePings":   "go-only: a counter for tests of the keep-awake; keepalive's answer counts its own pings",
	"Session.WriteFile":        "op:write",
	"Session.WriteFileDurable": "go-only: fsync before the answer; the packages' write is the plain one",
	"Session.OpenTar":          "op:download_dir",
	"Session.ReadTar":          "op:download_dir",
	"Session.OpenTarExact":     "go-only: a checkpoint's save is what it is for, and the packages save through the checkpoint, fork and volume ops, which read the tree with it",
	"Session.WriteTar":         "op:upload_dir",
	"Session.WriteTarExact":    "go-only: a checkpoint's restore is what it is for, and the packages restore (and fork) through the restore and fork ops, which lay the files with it",
	"Session.Serves":           "go-only: asks which routes the sandbox's agentd serves, so the library picks a route with a fallback; the engine's ops make that choice themselves",
	"Session.Endpoint":         "op:info",
	"Session.String":           "go-only: fmt.Stringer",
	"Session.GoString":         "go-only: fmt.GoStringer",
	"Session.LogValue":         "go-only: slog.LogValuer",
	"Session.Invalidate":       "go-only: drops cached proxy credentials; the engine's session does it itself",
	"Session.Mints":            "go-only: a test counter of proxy credential mints",
	"Session.ConnectHeaders":   "op:url",
	// client.Exec: one exec by id
	"Exec.ID":                 "op:start",
	"Exec.Poll":               "op:poll",
	"Exec.Ack":                "op:wait",
	"Exec.Release":            "op:wait",
	"Exec.Kill":               "op:kill",
	"Exec.Signal":             "op:signal",
	"Exec.Resize":             "op:resize",
	"Exec.WriteStdin":         "op:stdin_write",
	"Exec.CloseStdin":         "op:stdin_close",
	"Exec.WriteStdinAndClose": "op:stdin_close",
	"Exec.CopyStdin":          "op:stdin_write",
	"Exec.Stream":             "op:follow",
	"Exec.Attach":             "op:follow",
	// client.Process: an exec with its output as readers
	"Process.Attached": "op:follow",
	"Process.Exec":     "op:start",
	"Process.Stdout":   "op:follow",
	"Process.Stderr":   "op:follow",
	"Process.Gaps":     "op:follow",
	"Process.Err":      "op:follow",
	"Process.Kill":     "op:kill",
	"Process.Signal":   "op:signal",
	"Process.Close":    "op:cancel",
	"Process.Wait":     "op:wait",
	// client.Watch
	"Watch.Ready": "op:watch",
	"Watch.Next":  "op:watch",
	"Watch.Close": "op:cancel",
}

// surfaceTypes are the types whose exported methods are the sandbox surface.
var surfaceTypes = map[string][]string{
	"client/sandbox": {"Sandbox", "Handle", "Pool"},
	"client":         {"Session", "Exec", "Process", "Watch"},
}

// notYetInTypeScript are ops the TypeScript package does not call yet: the
// TypeScript helper's branch (issue 45) empties it. Nothing else is tolerated.
var notYetInTypeScript = map[string]bool{}

// notForPython are ops for a runtime that lacks what Python has: mkfifo
// makes Node's sink FIFOs, which Python makes with os.mkfifo.
var notForPython = map[string]bool{engineapi.OpMkfifo: true}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root: %v", err)
	}
	return root
}

// exportedMethods is every exported method, as Type.Method, declared on the
// named types in dir's non-test files.
func exportedMethods(t *testing.T, dir string, types []string) []string {
	t.Helper()
	want := map[string]bool{}
	for _, ty := range types {
		want[ty] = true
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			rt := fd.Recv.List[0].Type
			if st, ok := rt.(*ast.StarExpr); ok {
				rt = st.X
			}
			id, ok := rt.(*ast.Ident)
			if ok && want[id.Name] {
				out = append(out, id.Name+"."+fd.Name.Name)
			}
		}
	}
	return out
}

// TestSurfaceMatchesTheGoLibrary catches a sandbox method added to the Go
// library without its engine op (or a reasoned go-only row), and a row
// naming an op api/engine.yaml does not declare.
func TestSurfaceMatchesTheGoLibrary(t *testing.T) {
	root := repoRoot(t)
	ops := map[string]bool{}
	for _, o := range engineapi.Ops {
		ops[o.Name] = true
	}
	seen := map[string]bool{}
	for dir, types := range surfaceTypes {
		for _, m := range exportedMethods(t, filepath.Join(root, dir), types) {
			seen[m] = true
			row, ok := surface[m]
			if !ok {
				t.Errorf("%s is a sandbox capability of the Go library with no row in surface: give it an engine op (api/engine.yaml) and its Python and TypeScript calls, or a go-only reason", m)
				continue
			}
			if op, isOp := strings.CutPrefix(row, "op:"); isOp && !ops[op] {
				t.Errorf("%s maps to op %s, which api/engine.yaml does not declare", m, op)
			} else if !isOp && !strings.HasPrefix(row, "go-only: ") {
				t.Errorf("%s: row %q is neither op:<name> nor go-only: <reason>", m, row)
			}
		}
	}
	var stale []string
	for m := range surface {
		if !seen[m] {
			stale = append(stale, m)
		}
	}
	sort.Strings(stale)
	for _, m := range stale {
		t.Errorf("surface names %s, which the Go library no longer has", m)
	}
}

// sources is the text of the non-generated files of a package's source dir.
func sources(t *testing.T, dir, ext, generated string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if filepath.Base(f) == generated {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// tsMethods maps each op to the protected method contract.ts generates for it.
var tsMethod = regexp.MustCompile(`protected (?:async )?(op\w+)\(args: \w+\)[^{]*\{\s*return[^"]*"(\w+)"`)

// TestEveryOpHasItsCallers catches an engine op that a package's hand-written
// code never calls (the generated contract declares every op, so it is not
// counted): Python's _op_<name>, TypeScript's op<Name>.
func TestEveryOpHasItsCallers(t *testing.T) {
	root := repoRoot(t)
	py := sources(t, filepath.Join(root, "clients/python/microvms"), ".py", "_contract.py")
	ts := sources(t, filepath.Join(root, "clients/typescript/src"), ".ts", "contract.ts")
	contract, err := os.ReadFile(filepath.Join(root, "clients/typescript/src/contract.ts"))
	if err != nil {
		t.Fatal(err)
	}
	method := map[string]string{}
	for _, m := range tsMethod.FindAllStringSubmatch(string(contract), -1) {
		method[m[2]] = m[1]
	}
	for _, o := range engineapi.Ops {
		inPy := regexp.MustCompile(`_op_` + o.Name + `\(`).MatchString(py)
		switch {
		case !inPy && !notForPython[o.Name]:
			t.Errorf("op %s has no caller in clients/python/microvms (want self._engine._op_%s(...) outside _contract.py)", o.Name, o.Name)
		case inPy && notForPython[o.Name]:
			t.Errorf("op %s is called in clients/python/microvms: take it off notForPython", o.Name)
		}
		name := method[o.Name]
		if name == "" {
			t.Errorf("op %s has no method in clients/typescript/src/contract.ts (make gen)", o.Name)
			continue
		}
		inTS := regexp.MustCompile(`\b` + name + `\(`).MatchString(ts)
		switch {
		case !inTS && !notYetInTypeScript[o.Name]:
			t.Errorf("op %s has no caller in clients/typescript/src (want %s(...) outside contract.ts)", o.Name, name)
		case inTS && notYetInTypeScript[o.Name]:
			t.Errorf("op %s is called in clients/typescript/src: take it off notYetInTypeScript", o.Name)
		}
	}
}
