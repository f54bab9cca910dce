// Command mutate runs mutation testing (go-gremlins, pinned in tools.go) over
// a list of packages, one package at a time, and prints a per-package table
// of killed, lived, timed-out and not-covered mutants with the kill rate,
// followed by every surviving mutant so each can be killed by a test or
// argued equivalent.
//
// It is `make mutate`, not part of `make check`: a package costs minutes.
// It must never edit the tree it is run in: gremlins mutates copies in
// temporary directories, and this command only reads their JSON reports.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// report is the part of gremlins' -o JSON this command reads.
type report struct {
	Files []struct {
		Name      string `json:"file_name"` // relative to the package directory
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
	Elapsed float64 `json:"elapsed_time"`
}

// mutant is one surviving mutation: where it is and what gremlins changed.
type mutant struct {
	file         string
	line, column int
	kind         string
}

type row struct {
	pkg                                        string
	killed, lived, timedOut, notCovered, other int
	elapsed                                    time.Duration
	survivors                                  []mutant
	err                                        error
}

// rate is the kill rate of covered mutants: killed and timed out over
// killed, timed out and lived (a timed-out mutant was detected, as in PIT and
// Stryker; its column lets a reader recompute without it).
func (r row) rate() string {
	caught := r.killed + r.timedOut
	if caught+r.lived == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(caught)/float64(caught+r.lived))
}

func main() {
	pkgs := flag.String("pkgs", "", "space-separated package directories, relative to the module root (make mutate passes MUTATE_PKGS)")
	workers := flag.Int("workers", 1, "gremlins workers (each runs one mutant's tests at a time)")
	coefficient := flag.Int("timeout-coefficient", 10, "a mutant's test run may take this many times the coverage run")
	files := flag.String("files", "", "space-separated file names: mutate only these files of each package (for a package too slow to run whole)")
	floor := flag.Duration("timeout-floor", 90*time.Second, "the least time a mutant's test run (build included) gets before it counts as timed out")
	out := flag.String("out", "bin/mutate", "directory for gremlins' JSON reports and logs")
	flag.Parse()
	if strings.TrimSpace(*pkgs) == "" {
		fatal(fmt.Errorf("no packages: -pkgs 'client/cost agentd/internal/tarx'"))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	// Absolute: a package gremlins misnames runs in a staged copy (stage).
	if abs, err := filepath.Abs(*out); err == nil {
		*out = abs
	}
	gremlins, err := filepath.Abs(filepath.Join(*out, "gremlins"))
	if err != nil {
		fatal(err)
	}
	build := exec.Command("go", "build", "-o", gremlins, "github.com/go-gremlins/gremlins/cmd/gremlins")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fatal(fmt.Errorf("building gremlins: %w", err))
	}
	var rows []row
	for _, pkg := range strings.Fields(*pkgs) {
		rows = append(rows, run(gremlins, pkg, strings.Fields(*files), *out, *workers, *coefficient, *floor))
	}
	print(os.Stdout, rows)
	for _, r := range rows {
		if r.err != nil {
			os.Exit(1)
		}
	}
}

func run(gremlins, pkg string, only []string, out string, workers, coefficient int, floor time.Duration) row {
	pkg = strings.TrimSuffix(strings.TrimPrefix(pkg, "./"), "/")
	r := row{pkg: pkg}
	// root is the tree gremlins runs in and target the package's directory
	// there: the module itself, unless gremlins would test the wrong package.
	root, target := ".", pkg
	if staged, dir, err := stage(pkg); err != nil {
		r.err = err
		return r
	} else if staged != "" {
		defer os.RemoveAll(staged)
		root, target = staged, dir
	}
	// gremlins gives a mutant coefficient times its coverage run, which for
	// a small package is well under the time a loaded machine needs to
	// rebuild and link the mutated test binary: every such mutant would
	// "time out". Timing the same run here lets the coefficient be raised so
	// that no mutant gets less than floor.
	cover := exec.Command("go", "test", "-count=1", "-cover", "./"+target+"/...")
	cover.Dir = root
	cover.Stdout, cover.Stderr = io.Discard, io.Discard
	t0 := time.Now()
	if err := cover.Run(); err != nil {
		r.err = fmt.Errorf("the package's tests fail unmutated: %w", err)
		return r
	}
	if took := time.Since(t0); time.Duration(coefficient)*took < floor {
		coefficient = int(floor/took) + 1
	}
	name := strings.ReplaceAll(pkg, "/", "_")
	jsonPath := filepath.Join(out, name+".json")
	logFile, err := os.Create(filepath.Join(out, name+".log"))
	if err != nil {
		r.err = err
		return r
	}
	defer logFile.Close()
	fmt.Fprintf(os.Stderr, "mutate: %s, timeout coefficient %d (log %s)\n", pkg, coefficient, logFile.Name())
	// --exclude-files /: gremlins walks the package directory recursively,
	// and a file in a subdirectory belongs to another package with its own row.
	args := []string{"unleash",
		"--workers", fmt.Sprint(workers),
		"--timeout-coefficient", fmt.Sprint(coefficient),
		"--exclude-files", "/",
		"--output", jsonPath}
	if len(only) > 0 {
		// gremlins' regexps have no negation: every other file is excluded
		// by name.
		all, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil {
			r.err = err
			return r
		}
		for _, f := range all {
			if base := filepath.Base(f); !strings.HasSuffix(base, "_test.go") && !slices.Contains(only, base) {
				args = append(args, "--exclude-files", "^"+regexp.QuoteMeta(base)+"$")
			}
		}
		r.pkg += " (" + strings.Join(only, ", ") + ")"
	}
	cmd := isolated(exec.Command(gremlins, append(args, "./"+target)...))
	cmd.Dir = root
	// gremlins runs go test without -count=1, and go test reuses a cached
	// pass when the test binary is unchanged. A command's tests are external
	// (package main_test) and build the binary in a child process, so a
	// mutant of the command leaves the test binary as it was: every mutant
	// the first run did not kill "lived" from the cache (37 of 54 in
	// cmd/microvm's first run). Every mutant runs its tests.
	cmd.Env = append(os.Environ(), strings.TrimSpace("GOFLAGS=-count=1 "+os.Getenv("GOFLAGS")))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	_ = os.Remove(jsonPath)
	if err := cmd.Run(); err != nil {
		r.err = fmt.Errorf("gremlins: %w (see %s)", err, logFile.Name())
		return r
	}
	r.elapsed = time.Since(start)
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		r.err = err
		return r
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		r.err = fmt.Errorf("%s: %w", jsonPath, err)
		return r
	}
	for _, f := range rep.Files {
		for _, m := range f.Mutations {
			switch m.Status {
			case "KILLED":
				if m.Type == "ARITHMETIC_BASE" && !compiles(pkg, f.Name, m.Line, m.Column) {
					r.other++ // not viable: see compiles
					continue
				}
				r.killed++
			case "LIVED":
				r.lived++
				r.survivors = append(r.survivors, mutant{pkg + "/" + f.Name, m.Line, m.Column, m.Type})
			case "TIMED OUT":
				r.timedOut++
			case "NOT COVERED":
				r.notCovered++
			default: // NOT VIABLE (does not compile), SKIPPED
				r.other++
			}
		}
	}
	slices.SortFunc(r.survivors, func(a, b mutant) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line), cmp.Compare(a.column, b.column), cmp.Compare(a.kind, b.kind))
	})
	return r
}

func print(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| package | killed | lived | timed out | not covered | not viable | kill rate (covered) | time |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(w, "| %s | error: %v | | | | | | |\n", r.pkg, r.err)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s | %s |\n", r.pkg, r.killed, r.lived, r.timedOut, r.notCovered, r.other, r.rate(), r.elapsed.Round(time.Second))
	}
	for _, r := range rows {
		if len(r.survivors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nLived in %s:\n", r.pkg)
		for _, m := range r.survivors {
			fmt.Fprintf(w, "  %s:%d:%d %s\n", m.file, m.line, m.column, m.kind)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutate:", err)
	os.Exit(1)
}

// stage works around gremlins 0.6 naming a file's package by walking up from
// its directory to the first one whose path ends with the package clause's
// name, and the module root if none does. For a command (package main in
// cmd/microvm) that is the module root: every mutant's `go test` then fails
// at setup and is counted killed. Such a package is mutated in a copy of the
// module's files in which its directory is renamed to end with its name
// (cmd/microvm becomes cmd/microvm_main); nothing imports a command, so the
// copy builds and tests as the original does. staged is "" when the package
// needs no copy.
func stage(pkg string) (staged, dir string, err error) {
	out, err := exec.Command("go", "list", "-f", "{{.Name}}", "./"+pkg).Output()
	if err != nil {
		return "", "", fmt.Errorf("go list ./%s: %w", pkg, err)
	}
	name := strings.TrimSpace(string(out))
	if gremlinsPackageDir(pkg, name) == pkg {
		return "", "", nil
	}
	dir = pkg + "_" + name
	if gremlinsPackageDir(dir, name) != dir {
		return "", "", fmt.Errorf("%s: gremlins cannot name package %s's directory", pkg, name)
	}
	files, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return "", "", fmt.Errorf("listing the module's files: %w", err)
	}
	staged, err = os.MkdirTemp("", "mutate-stage-")
	if err != nil {
		return "", "", err
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		dst := f
		if rest, ok := strings.CutPrefix(f, pkg+"/"); ok {
			dst = dir + "/" + rest
		}
		if err := copyFile(f, filepath.Join(staged, dst)); err != nil {
			os.RemoveAll(staged)
			return "", "", err
		}
	}
	return staged, dir, nil
}

// gremlinsPackageDir is the directory gremlins 0.6 takes for the package of
// a file in dir whose package clause says name (its engine.pkgName).
func gremlinsPackageDir(dir, name string) string {
	for p := dir; ; {
		if strings.HasSuffix(p, name) {
			return p
		}
		up := filepath.Dir(p)
		if up == p {
			return "."
		}
		p = up
	}
}

func copyFile(src, dst string) error {
	info, err := os.Lstat(src)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // listed by git, deleted in the work tree
		}
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if info.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, raw, info.Mode().Perm())
}

// arithmeticBase is gremlins 0.6's ARITHMETIC_BASE replacement per operator.
var arithmeticBase = map[string]string{"+": "-", "-": "+", "*": "/", "/": "*", "%": "*"}

// compiles says whether pkg still builds with the ARITHMETIC_BASE mutant at
// line:column of file applied. gremlins 0.6 counts a mutant whose package no
// longer compiles as killed: go test exits 1 for a build failure, and
// gremlins reads 1 as a failing test (only 2 is "not viable"). `+` made `-`
// between strings is the usual case, and a constant expression that
// overflows is another. The mutant is laid over the tree with go build
// -overlay, so the tree is never edited. Any doubt (the file or the operator
// not where the report says) answers true: the mutant stays killed.
func compiles(pkg, file string, line, column int) bool {
	path := filepath.Join(pkg, file)
	src, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	off := 0
	for l := 1; l < line; l++ {
		i := strings.IndexByte(string(src[off:]), '\n')
		if i < 0 {
			return true
		}
		off += i + 1
	}
	off += column - 1
	if off < 0 || off >= len(src) {
		return true
	}
	repl, ok := arithmeticBase[string(src[off])]
	if !ok {
		return true
	}
	mutated := append(append(append([]byte{}, src[:off]...), repl...), src[off+1:]...)
	dir, err := os.MkdirTemp("", "mutate-viable-")
	if err != nil {
		return true
	}
	defer os.RemoveAll(dir)
	abs, err := filepath.Abs(path)
	if err != nil {
		return true
	}
	mpath := filepath.Join(dir, filepath.Base(file))
	overlay := filepath.Join(dir, "overlay.json")
	spec, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mpath}})
	if os.WriteFile(mpath, mutated, 0o644) != nil || os.WriteFile(overlay, spec, 0o644) != nil {
		return true
	}
	build := exec.Command("go", "build", "-overlay", overlay, "-o", os.DevNull, "./"+pkg)
	build.Stdout, build.Stderr = io.Discard, io.Discard
	return build.Run() == nil
}

// isolated runs cmd in its own UTS and mount namespaces when this process
// is root and unshare(1) is there. A mutant can turn agentd's identity
// repair on, or swap a test's injected sethostname and mount for the real
// calls (`!cfg.Enabled` or `cfg.SetHostname == nil` negated in
// identity_linux.go), and as root on the host that renamed this machine (a
// run of identity_linux.go set its hostname to microvm-<hex>) and left bind
// mounts under /tmp. Inside the namespaces the hostname and the mounts die
// with the run. A process that is not root cannot make either call, so it
// runs as it is.
func isolated(cmd *exec.Cmd) *exec.Cmd {
	if os.Geteuid() != 0 {
		return cmd
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate: running as root without unshare(1): a mutant of agentd's identity repair can rename this machine")
		return cmd
	}
	wrapped := exec.Command(unshare, append([]string{"--uts", "--mount", "--propagation", "private", "--"}, cmd.Args...)...)
	return wrapped
}
